"""NodeClaim controllers beside lifecycle: disruption conditions, pod events and expiration (Karpenter's
pkg/controllers/nodeclaim/{disruption,podevents,expiration})."""
