"""The names karpy gives the AWS resources it creates, derived from the cluster name, and checked against AWS's limits
at synth time: a name AWS would refuse fails `synth` (and `render`) naming the resource, instead of failing
`terraform apply` half-way through.

Pure: no cdktn, no boto3. The stacks create resources under these names and `karpy render` writes the same names
into the manifests, so both paths agree on them.
"""

from __future__ import annotations

import re

# re-exported: the stacks and render read it here beside the names
from controller.cloud.aws.partitions import partition_of as partition_of

IAM_ROLE_NAME_MAX = 64  # IAM CreateRole: RoleName, 1-64 of [\w+=,.@-]
IAM_POLICY_NAME_MAX = 128  # IAM CreatePolicy: PolicyName
RULE_NAME_MAX = 64  # EventBridge PutRule: Name, 1-64 of [\.\-_A-Za-z0-9]
QUEUE_NAME_MAX = 80  # SQS CreateQueue: QueueName, 1-80 of [A-Za-z0-9_-]
_IAM_NAME = re.compile(r"^[\w+=,.@-]+$")
_RULE_NAME = re.compile(r"^[.\-_A-Za-z0-9]+$")
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


class InvalidName(ValueError):
    """A name AWS would refuse; the message names the resource, the name and the limit."""


def _check(what: str, name: str, limit: int, pattern: re.Pattern[str], allowed: str, fix: str = "") -> str:
    if len(name) > limit:
        raise InvalidName(f"{what} name {name!r} is {len(name)} characters; AWS allows at most {limit}"
                          + (f" (set a shorter {fix} in the environment file)" if fix else ""))
    if not pattern.match(name):
        raise InvalidName(f"{what} name {name!r}: AWS allows only {allowed}")
    return name


def node_role_name(cluster_name: str, override: str | None = None) -> str:
    """KarpenterNodeRole-<cluster>, as Karpenter's getting-started template names it; EC2NodeClass `role` names it."""
    return _check("node IAM role", override or f"KarpenterNodeRole-{cluster_name}", IAM_ROLE_NAME_MAX, _IAM_NAME,
                  "letters, digits and +=,.@_-", "node_role_name")


def controller_role_name(cluster_name: str, override: str | None = None) -> str:
    """KarpenterController-<cluster>: the role the controller's pods assume."""
    return _check("controller IAM role", override or f"KarpenterController-{cluster_name}", IAM_ROLE_NAME_MAX,
                  _IAM_NAME, "letters, digits and +=,.@_-", "controller_role_name")


def controller_policy_name(suffix: str, cluster_name: str) -> str:
    """Karpenter<concern>-<cluster>: one managed policy per concern."""
    return _check("controller IAM policy", f"Karpenter{suffix}-{cluster_name}", IAM_POLICY_NAME_MAX, _IAM_NAME,
                  "letters, digits and +=,.@_-")


def queue_name(cluster_name: str, override: str | None = None) -> str:
    """The interruption queue: the cluster's name, as Karpenter's getting-started template does."""
    return _check("interruption queue", override or cluster_name, QUEUE_NAME_MAX, _QUEUE_NAME,
                  "letters, digits, - and _", "queue_name")


def rule_names(queue: str, suffixes: list[str]) -> dict[str, str]:
    """One EventBridge rule per interruption event, <queue>-<suffix>. Names over 64 characters are refused rather
    than cut: cut names of a long queue name collide (…-CapacityReservationInterruption and …-Capac… end alike) or
    stop saying which event they carry."""
    names = {s: _check("EventBridge rule", f"{queue}-{s}", RULE_NAME_MAX, _RULE_NAME, "letters, digits, ., - and _",
                         "queue_name (the rules are named <queue_name>-<event>)")
             for s in suffixes}
    seen: dict[str, str] = {}
    for suffix, name in names.items():
        if name in seen:
            raise InvalidName(f"EventBridge rules {seen[name]} and {suffix} would both be named {name!r}")
        seen[name] = suffix
    return names


def role_arn(partition: str, account_id: str, path: str, name: str) -> str:
    """An IAM role's ARN, path included (IAM puts the path between role/ and the name)."""
    return f"arn:{partition}:iam::{account_id}:role{path if path.startswith('/') else '/' + path}{name}"
