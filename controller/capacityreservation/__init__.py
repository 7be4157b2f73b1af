"""Karpenter's AWS capacity reservation controllers: capacity type (reserved nodes whose reservation ended become
on-demand) and expiration (nodes of a capacity block about to end are replaced)."""
