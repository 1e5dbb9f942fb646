"""`optlease agent`: run the migfra-compatible agent of one host (MQTT tasks in, libvirt, MQTT results out)."""
from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from optlease.cli.app import app
from optlease.errors import InputError

# The domains an agent manages by default (optlease.enact.agent.owned.OPTLEASE_NAMES, which a test keeps equal):
# written out here because importing the agent's package loads libvirt and paho, for every command of the CLI.
OPTLEASE_NAMES = r"lease-[0-9]+-vm-[0-9]+"


@app.command("agent")
def agent(
    host: Annotated[str, typer.Option("--host", help="This host's name: the <host> of fast/migfra/<host>/task.",
                                      envvar="OPTLEASE_AGENT_HOST", show_default=False)],
    libvirt_uri: Annotated[str, typer.Option("--libvirt", help="libvirt URI to drive, e.g. qemu:///system or "
                                             "test:///default.", envvar="OPTLEASE_LIBVIRT_URI")] = "qemu:///system",
    broker: Annotated[str, typer.Option("--broker", help="MQTT broker as HOST:PORT.",
                                        envvar="OPTLEASE_MQTT_BROKER")] = "localhost:1883",
    username: Annotated[Optional[str], typer.Option("--username", help="MQTT user name.",
                                                    envvar="OPTLEASE_MQTT_USERNAME")] = None,
    password: Annotated[Optional[str], typer.Option("--password", help="MQTT password (prefer the environment "
                                                    "variable: command lines are visible to every user).",
                                                    envvar="OPTLEASE_MQTT_PASSWORD")] = None,
    tls_ca: Annotated[Optional[Path], typer.Option("--tls-ca", help="CA certificate file: connect with TLS and "
                                                   "verify the broker against it.", exists=True, dir_okay=False,
                                                   envvar="OPTLEASE_MQTT_TLS_CA")] = None,
    handoff_timeout: Annotated[float, typer.Option("--handoff-timeout", min=0.1, help="Seconds a migration waits "
                                                   "for the destination agent to take the domain.")] = 30.0,
    migrate_uri: Annotated[Optional[str], typer.Option("--migrate-uri", help="Migrate libvirt to libvirt instead "
                                                       "of over the broker; {host} is replaced by the destination, "
                                                       "e.g. 'qemu+ssh://{host}/system'.")] = None,
    # at most a day: a longer wait than the clock's timers take (inf, 1e400) would kill the heartbeat thread
    heartbeat: Annotated[float, typer.Option("--heartbeat", min=0, max=86_400, help="Seconds between two status "
                                             "messages (`task: heartbeat`) while connected, so the lease manager "
                                             "can tell that this host is alive; 0: announce on connect only.",
                                             envvar="OPTLEASE_AGENT_HEARTBEAT")] = 10.0,
    adopt: Annotated[str, typer.Option("--adopt", help="Regular expression: the domains this agent did not start "
                                       "itself but may manage (whole names). Any other domain on the host is left "
                                       "alone whoever asks; '' adopts none.")] = OPTLEASE_NAMES,
    insecure: Annotated[bool, typer.Option("--insecure", help="Connect without credentials or TLS: any process "
                                           "that reaches the broker could then command this host's VMs.",
                                           envvar="OPTLEASE_MQTT_INSECURE")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every task on stderr.")] = False,
) -> None:
    """Run the agent of one host: take FAST migfra tasks from the broker, drive libvirt, publish the results."""
    # imported here: libvirt and paho load only for the command that needs them
    from optlease.enact.agent import AgentError, Broker, BrokerError, parse_address, run_agent
    from optlease.enact.fast import FastProtocolError, check_host

    try:
        check_host(host)
    except FastProtocolError as exc:
        raise InputError(exc.message, "--host") from None
    try:
        address, port = parse_address(broker)
    except InputError as exc:
        raise exc.located("--broker") from None
    if password is not None and username is None:
        raise InputError("a password needs a --username", "--password")
    if username is None and tls_ca is None and not insecure:
        # as the daemon's mode fast: an open broker lets anyone drive the hypervisor, so it takes an explicit yes
        raise InputError("neither --username nor --tls-ca: anyone who reaches the broker could command this host "
                         "(docs/enactment.md says how to set up mosquitto with passwords and ACLs); "
                         "or say --insecure", "--broker")
    try:
        re.compile(adopt)
    except re.error as exc:
        raise InputError(f"not a regular expression: {exc}", "--adopt") from None
    if migrate_uri is not None and "{host}" not in migrate_uri:
        raise InputError("the URI must contain {host}, where the destination goes", "--migrate-uri")
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = Broker(address, port, username, password, None if tls_ca is None else str(tls_ca))
    try:
        run_agent(host, libvirt_uri, settings, handoff_timeout=handoff_timeout, migrate_uri=migrate_uri,
                  heartbeat=heartbeat, adopt=adopt or None)
    except (AgentError, BrokerError) as exc:
        # not bad input: the outside world is not there; one line and exit 1, no traceback
        print(f"optlease: error: {exc}", file=sys.stderr)
        raise typer.Exit(1) from None
