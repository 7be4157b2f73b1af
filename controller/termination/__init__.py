"""Node termination: taint, drain in Karpenter's tiers, volume detachment, instance termination, finalizers."""
