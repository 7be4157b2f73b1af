"""NodeClaim lifecycle (Karpenter's pkg/controllers/nodeclaim/lifecycle): launch, registration, initialization and
liveness in controller.py; lifecycle's finalize, the NodeClaim termination finalizer, is controller/nodeclaim/
termination.py."""
