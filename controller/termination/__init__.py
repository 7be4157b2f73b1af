"""Node termination, as Karpenter's pkg/controllers/node/termination: controller.py (the Node finalizer), terminator.py
(taint and drain), eviction.py (the eviction queue), drain.py (the pure decisions), instance.py (instance termination
and the NodeClaim conditions it writes). The NodeClaim finalizer is controller/nodeclaim/termination.py."""
