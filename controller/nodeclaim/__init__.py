"""NodeClaim controllers beside lifecycle: disruption conditions, pod events, expiration and the termination
finalizer (Karpenter's pkg/controllers/nodeclaim/{disruption,podevents,expiration} and lifecycle's finalize)."""
