"""`karpy simulate`: an offline dry run of Karpenter's provisioning."""
