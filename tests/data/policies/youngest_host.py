"""A custom host-selection policy, loaded by dotted path as in the Haizea manual's chapter 9: highest node first."""


class HighestNodeFirst:
    def score(self, node, time, lease, table):
        return float(node)
