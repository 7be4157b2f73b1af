"""Environments are the user's: one YAML file per environment in the project's environments directory (beside
cdktf.json; `environments/` unless cdktf.json's context names another with "karpyEnvironments"). A file holds the
environment's facts (account, region, cluster, identity provider, network, state backend, pools); everything karpy
creates is derived from them in stacks/app.py and stacks/render.py.

Validation is strict and speaks of the file: an unknown key, a wrong type or a malformed value is one line naming
the file and the field, e.g. `environments/dev.yaml: account_id: expected 12 digits, got '1234'`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

DEFAULT_DIR = "environments"
CONTEXT_KEY = "karpyEnvironments"  # cdktf.json context key naming another environments directory
SUFFIXES = (".yaml", ".yml")
_ENV_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
_ACCOUNT = re.compile(r"^\d{12}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_CLUSTER = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")  # EKS cluster names
_OIDC_ARN = re.compile(r"^arn:aws[a-z-]*:iam::(\d{12}):oidc-provider/(.+)$")
_POLICY_ARN = re.compile(r"^arn:aws[a-z-]*:iam::(\d{12}|aws):policy/.+$")
_SUBNET = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_SG = re.compile(r"^sg-[0-9a-f]{8,17}$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_IAM_PATH = re.compile(r"^/([\x21-\x7e]{0,510}/)?$")
# settings the environment's own fields set; naming them under `settings` would say the same thing twice
_DERIVED_SETTINGS = {"CLUSTER_NAME": "cluster_name", "CLUSTER_ENDPOINT": "cluster_endpoint",
                     "INTERRUPTION_QUEUE": "queue_name", "AWS_REGION": "region", "SYSTEM_NAMESPACE": "namespace"}
MAX_ERROR = 300


class InvalidEnvironment(ValueError):
    """An environment file that cannot be used; the message is one line naming the file and the field."""


@dataclass(frozen=True)
class EnvironmentConfig:
    """One environment, as its file describes it (defaults in the field comments)."""

    name: str
    account_id: str
    region: str
    cluster_name: str
    cluster_endpoint: str | None = None  # None: the stacks read it from EKS; the controller asks EKS at start
    oidc_provider_arn: str | None = None  # IRSA; leave unset to use Pod Identity only
    oidc_issuer: str | None = None
    pod_identity: bool = False
    subnet_ids: list[str] = field(default_factory=list)  # tagged karpenter.sh/discovery=<cluster>
    security_group_ids: list[str] = field(default_factory=list)
    namespace: str = "kube-system"
    service_account: str = "karpenter"
    image_repository: str = "public.ecr.aws/karpy/controller"
    image_tag: str | None = None  # None: the installed karpy's version
    replicas: int = 2
    settings: dict[str, str] = field(default_factory=dict)  # further controller settings (FEATURE_GATES, …)
    state_bucket: str | None = None  # S3 state backend when set; local state otherwise
    state_lock_table: str | None = None  # DynamoDB table for state locking with the S3 backend
    state_use_lockfile: bool = False  # S3-native state locking (Terraform >= 1.10) instead of a lock table
    tags: dict[str, str] = field(default_factory=dict)
    create_spot_service_linked_role: bool = False  # once per account, and only if it does not exist yet
    node_join: str = "access-entry"  # or "aws-auth": the stack then outputs aws_auth_map_role to merge into aws-auth
    iam_path: str = "/"
    permissions_boundary: str | None = None  # ARN of a boundary policy for the roles karpy creates
    node_role_name: str | None = None  # default KarpenterNodeRole-<cluster>
    controller_role_name: str | None = None  # default KarpenterController-<cluster>
    queue_name: str | None = None  # default <cluster>; the rules are <queue_name>-<event>
    pools: list[dict[str, Any]] = field(default_factory=list)  # NodePools and EC2NodeClasses (v1 manifests)
    source: str = ""  # the file it was read from, for messages
    pools_source: str = ""  # where the pools came from, for messages

    @property
    def pools_stack(self) -> str:
        """The name of the stack holding the NodePools and EC2NodeClasses."""
        return f"{self.name}-pools"


# ----------------------------------------------------------------------------------------------------------- project
def project_root() -> Path:
    """The directory of cdktf.json: KARPY_PROJECT_DIR, else the working directory (where cdktf runs the app)."""
    return Path(os.environ.get("KARPY_PROJECT_DIR") or Path.cwd())


def environments_dir(root: Path | None = None) -> Path:
    """Where the environment files are: cdktf.json's context "karpyEnvironments" (relative to it), else
    <root>/environments."""
    root = root or project_root()
    name = DEFAULT_DIR
    cdktf = root / "cdktf.json"
    if cdktf.is_file():
        try:
            context = json.loads(cdktf.read_text()).get("context") or {}
        except (OSError, ValueError, AttributeError) as e:
            raise InvalidEnvironment(f"{cdktf}: not valid JSON ({_short(e)})") from None
        value = context.get(CONTEXT_KEY) if isinstance(context, dict) else None
        if value is not None:
            if not isinstance(value, str) or not value:
                raise InvalidEnvironment(f"{cdktf}: context.{CONTEXT_KEY}: expected a directory path")
            name = value
    return root / name


def environment_files(directory: Path) -> dict[str, Path]:
    """Environment name -> file, for the YAML files directly in directory (sorted by name)."""
    if not directory.is_dir():
        return {}
    found = sorted(p for p in directory.iterdir() if p.suffix in SUFFIXES and p.is_file())
    return {p.stem: p for p in found}


def environment_names(root: Path | None = None) -> list[str]:
    """The names of the project's environments."""
    return list(environment_files(environments_dir(root)))


def load_environments(root: Path | None = None, names: list[str] | None = None) -> list[EnvironmentConfig]:
    """The named environments (default: all) of the project, validated; an unknown name or an empty project is an
    InvalidEnvironment saying what exists."""
    directory = environments_dir(root)
    files = environment_files(directory)
    if not files:
        raise InvalidEnvironment(f"no environments: {directory} has no .yaml files (create one with `karpy init`)")
    wanted = names or list(files)
    unknown = [n for n in wanted if n not in files]
    if unknown:
        raise InvalidEnvironment(f"unknown environment(s) {', '.join(unknown)}; known: {', '.join(files)} "
                                 f"(files in {directory})")
    return [load_environment(files[n]) for n in wanted]


# -------------------------------------------------------------------------------------------------------- validation
def _short(e: object) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= MAX_ERROR else text[:MAX_ERROR] + "…"


def _str(v: Any, pattern: re.Pattern[str] | None = None, what: str = "") -> str:
    if isinstance(v, bool) or not isinstance(v, str | int):
        raise ValueError(f"expected a string, got {type(v).__name__}")
    s = str(v)
    if pattern is not None and not pattern.match(s):
        raise ValueError(f"expected {what}, got {_short(repr(s))}")
    return s


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {_short(repr(v))}")
    return v


def _str_list(pattern: re.Pattern[str], what: str) -> Any:
    def parse(v: Any) -> list[str]:
        if not isinstance(v, list):
            raise ValueError(f"expected a list of {what}, got {type(v).__name__}")
        out = []
        for i, item in enumerate(v):
            try:
                out.append(_str(item, pattern, what))
            except ValueError as e:
                raise ValueError(f"[{i}]: {e}") from None
        return out
    return parse


def _str_map(v: Any) -> dict[str, str]:
    if not isinstance(v, dict):
        raise ValueError(f"expected a mapping of strings, got {type(v).__name__}")
    out = {}
    for k, item in v.items():
        if not isinstance(item, str | int | float) or isinstance(item, bool):
            raise ValueError(f"{k}: expected a string, got {type(item).__name__}")
        out[str(k)] = str(item)
    return out


def _account(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        raise ValueError("write the account id as a quoted string (\"012345678901\"), as YAML drops leading zeros "
                         "from numbers")
    return _str(v, _ACCOUNT, "12 digits")


def _replicas(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"expected a positive integer, got {_short(repr(v))}")
    return v


def _node_join(v: Any) -> str:
    s = _str(v)
    if s not in ("access-entry", "aws-auth"):
        raise ValueError(f"expected access-entry or aws-auth, got {s!r}")
    return s


def _settings(v: Any) -> dict[str, str]:
    from controller.settings import SPECS_BY_NAME

    values = _str_map(v)
    for name, value in values.items():
        if name in _DERIVED_SETTINGS:
            raise ValueError(f"{name}: set by the environment's {_DERIVED_SETTINGS[name]}, not here")
        spec = SPECS_BY_NAME.get(name)
        if spec is None:
            raise ValueError(f"{name}: not a controller setting (see `karpy controller --help`)")
        try:
            spec.parse(value)
        except Exception as e:  # each setting's own parser says what is wrong with the value
            raise ValueError(f"{name}: {_short(e)}") from None
    return values


_PARSERS: dict[str, Any] = {
    "account_id": _account,
    "region": lambda v: _str(v, _REGION, "an AWS region such as us-east-1"),
    "cluster_name": lambda v: _str(v, _CLUSTER, "an EKS cluster name (letters, digits, - and _, at most 100)"),
    "cluster_endpoint": lambda v: _str(v, re.compile(r"^https://[^\s/]+/?$"), "an https:// URL"),
    "oidc_provider_arn": lambda v: _str(v, _OIDC_ARN, "arn:aws:iam::<account>:oidc-provider/<issuer host/path>"),
    "oidc_issuer": lambda v: _str(v, re.compile(r"^https://\S+$"), "an https:// URL"),
    "pod_identity": _bool,
    "subnet_ids": _str_list(_SUBNET, "subnet ids (subnet-…)"),
    "security_group_ids": _str_list(_SG, "security group ids (sg-…)"),
    "namespace": lambda v: _str(v, _DNS1123, "a namespace name"),
    "service_account": lambda v: _str(v, _DNS1123, "a ServiceAccount name"),
    "image_repository": lambda v: _str(v, re.compile(r"^[a-z0-9][\w./:-]*[a-z0-9]$"), "an image repository"),
    "image_tag": lambda v: _str(v, re.compile(r"^[\w][\w.-]{0,127}$"), "an image tag"),
    "replicas": _replicas,
    "settings": _settings,
    "state_bucket": lambda v: _str(v, re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"), "an S3 bucket name"),
    "state_lock_table": lambda v: _str(v, re.compile(r"^[A-Za-z0-9_.-]{3,255}$"), "a DynamoDB table name"),
    "state_use_lockfile": _bool,
    "tags": _str_map,
    "create_spot_service_linked_role": _bool,
    "node_join": _node_join,
    "iam_path": lambda v: _str(v, _IAM_PATH, "an IAM path such as / or /karpy/"),
    "permissions_boundary": lambda v: _str(v, _POLICY_ARN, "an IAM policy ARN"),
    "node_role_name": _str,
    "controller_role_name": _str,
    "queue_name": _str,
}
REQUIRED = ("account_id", "region", "cluster_name")
KEYS = (*_PARSERS, "pools")


def _load_pools(value: Any, path: Path) -> tuple[list[dict[str, Any]], str]:
    """`pools:` is a list of manifests, or a path (relative to the environment file) to a manifest file or a
    directory of them."""
    if isinstance(value, list):
        for i, doc in enumerate(value):
            if not isinstance(doc, dict):
                raise ValueError(f"[{i}]: expected a NodePool or EC2NodeClass manifest, got {type(doc).__name__}")
        return value, f"{path}[pools]"
    if not isinstance(value, str) or not value:
        raise ValueError("expected a list of NodePool/EC2NodeClass manifests or a path to them")
    target = path.parent / value
    if target.is_dir():
        files = sorted(p for p in target.iterdir() if p.suffix in (*SUFFIXES, ".json") and p.is_file())
    elif target.is_file():
        files = [target]
    else:
        raise ValueError(f"{value}: no such file or directory (relative to {path.parent})")
    docs: list[dict[str, Any]] = []
    for f in files:
        try:
            loaded = [d for d in yaml.safe_load_all(f.read_text()) if d is not None]
        except (OSError, yaml.YAMLError) as e:
            raise ValueError(f"{f}: {_short(e)}") from None
        for i, doc in enumerate(loaded):
            if not isinstance(doc, dict):
                raise ValueError(f"{f}: document {i}: expected a manifest, got {type(doc).__name__}")
            docs.append(doc)
    return docs, str(target)


def load_environment(path: Path) -> EnvironmentConfig:
    """Read and validate one environment file; InvalidEnvironment names the file and the field at fault."""
    name = path.stem
    if not _ENV_NAME.match(name):
        raise InvalidEnvironment(f"{path}: the file name {name!r} is the environment's (and its stacks') name: use "
                                 "lowercase letters, digits and -, at most 40")
    if name.endswith("-pools"):
        raise InvalidEnvironment(f"{path}: the name {name!r} ends in -pools, which names the pools stack of "
                                 f"{name.removesuffix('-pools')!r}: choose another file name")
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise InvalidEnvironment(f"{path}: {_short(e.strerror or e)}") from None
    except yaml.YAMLError as e:
        raise InvalidEnvironment(f"{path}: not valid YAML ({_short(e)})") from None
    if not isinstance(raw, dict):
        raise InvalidEnvironment(f"{path}: expected a mapping of settings, got {type(raw).__name__}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        key = str(key)
        if key not in KEYS:
            raise InvalidEnvironment(f"{path}: {key}: unknown field; known: {', '.join(KEYS)}")
        if value is None:
            continue
        try:
            if key == "pools":
                values["pools"], values["pools_source"] = _load_pools(value, path)
            else:
                values[key] = _PARSERS[key](value)
        except ValueError as e:
            raise InvalidEnvironment(f"{path}: {key}: {_short(e)}") from None
    missing = [k for k in REQUIRED if k not in values]
    if missing:
        raise InvalidEnvironment(f"{path}: missing required field(s): {', '.join(missing)}")
    _check_together(path, values)
    known = {f.name for f in fields(EnvironmentConfig)}
    return EnvironmentConfig(name=name, source=str(path), **{k: v for k, v in values.items() if k in known})


def _check_together(path: Path, v: dict[str, Any]) -> None:
    """Rules across fields."""
    irsa = [k for k in ("oidc_provider_arn", "oidc_issuer") if k in v]
    if len(irsa) == 1:
        other = "oidc_issuer" if irsa == ["oidc_provider_arn"] else "oidc_provider_arn"
        raise InvalidEnvironment(f"{path}: {other}: required with {irsa[0]} (IRSA needs both)")
    if not irsa and not v.get("pod_identity"):
        raise InvalidEnvironment(f"{path}: pod_identity: set it to true, or set oidc_provider_arn and oidc_issuer "
                                 "(IRSA): the controller needs one way to its role")
    if irsa:
        m = _OIDC_ARN.match(v["oidc_provider_arn"])
        assert m is not None
        if m.group(1) != v["account_id"]:
            raise InvalidEnvironment(f"{path}: oidc_provider_arn: account {m.group(1)} is not account_id "
                                     f"{v['account_id']}")
        if m.group(2) != v["oidc_issuer"].removeprefix("https://").rstrip("/"):
            raise InvalidEnvironment(f"{path}: oidc_provider_arn: names {m.group(2)!r}, not oidc_issuer's host and "
                                     "path")
    if "state_bucket" in v and not (v.get("state_lock_table") or v.get("state_use_lockfile")):
        raise InvalidEnvironment(f"{path}: state_bucket: an S3 state backend without locking lets two deploys "
                                 "overwrite each other's state: set state_lock_table (DynamoDB) or state_use_lockfile: "
                                 "true (Terraform >= 1.10)")
    if "state_bucket" not in v and ("state_lock_table" in v or v.get("state_use_lockfile")):
        raise InvalidEnvironment(f"{path}: state_bucket: required with state_lock_table/state_use_lockfile")
    if v.get("region") and v.get("cluster_endpoint") and ".eks.amazonaws.com" in v["cluster_endpoint"] \
            and f".{v['region']}.eks." not in v["cluster_endpoint"]:
        raise InvalidEnvironment(f"{path}: cluster_endpoint: an EKS endpoint of another region than {v['region']}")


# ------------------------------------------------------------------------------------------------------------- init
def scaffold(name: str, account_id: str, region: str, cluster_name: str) -> str:
    """The text of a new environment file, every field shown with what it does; validated by load_environment."""
    return f"""# karpy environment "{name}": the facts of one cluster. `karpy synth`, `karpy render --env {name}` and
# `karpy deploy --env {name}` build everything else from them. Paths are relative to this file.
account_id: "{account_id}"        # quoted: YAML would drop leading zeros from a number
region: {region}
cluster_name: {cluster_name}
# cluster_endpoint: https://XXXX.gr7.{region}.eks.amazonaws.com   # default: read from EKS

# How the controller's pods get their IAM role: Pod Identity (needs the eks-pod-identity-agent add-on) ...
pod_identity: true
# ... or IRSA through the cluster's OIDC provider (aws eks describe-cluster --query cluster.identity.oidc.issuer):
# oidc_issuer: https://oidc.eks.{region}.amazonaws.com/id/XXXX
# oidc_provider_arn: arn:aws:iam::{account_id}:oidc-provider/oidc.eks.{region}.amazonaws.com/id/XXXX

# Subnets and security groups to tag karpenter.sh/discovery={cluster_name} (what the EC2NodeClass below selects)
subnet_ids: []
security_group_ids: []

# namespace: kube-system
# image_repository: public.ecr.aws/karpy/controller   # the tag is karpy's version unless image_tag is set
# settings: {{FEATURE_GATES: "SpotToSpotConsolidation=true"}}
# node_join: access-entry    # or aws-auth: the stack outputs the mapRoles entry to merge
# state_bucket: my-terraform-state      # S3 state; needs state_lock_table or state_use_lockfile: true
# state_use_lockfile: true
# tags: {{team: platform}}

# NodePools and EC2NodeClasses: inline manifests as here, or a path to a file or directory of them
# (pools: pools/{name}/). An EC2NodeClass without role gets the node role the stack creates.
pools:
  - apiVersion: karpenter.k8s.aws/v1
    kind: EC2NodeClass
    metadata: {{name: default}}
    spec:
      amiSelectorTerms: [{{alias: al2023@latest}}]
      subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: {cluster_name}}}}}]
      securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: {cluster_name}}}}}]
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {{name: default}}
    spec:
      template:
        spec:
          nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
          requirements:
            - {{key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}}
            - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}}
      limits: {{cpu: "1000"}}
"""


CDKTF_JSON = {
    "language": "python",
    "app": "karpy synth-app",
    "projectId": "karpy",
    "sendCrashReports": "false",
    "terraformProviders": [],  # karpy uses the prebuilt provider packages of its [infra] extra
    "terraformModules": [],
    "context": {},
}


def init_project(root: Path, name: str, account_id: str, region: str, cluster_name: str) -> list[Path]:
    """Write cdktf.json (unless there is one) and <environments dir>/<name>.yaml, and check the new file loads;
    returns the files written. An existing environment file is never overwritten."""
    if not _ENV_NAME.match(name):
        raise InvalidEnvironment(f"environment name {name!r}: use lowercase letters, digits and -, at most 40")
    written = []
    cdktf = root / "cdktf.json"
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not cdktf.exists():
            cdktf.write_text(json.dumps(CDKTF_JSON, indent=2) + "\n")
            written.append(cdktf)
        directory = environments_dir(root)
        path = directory / f"{name}.yaml"
        if path.exists():
            raise InvalidEnvironment(f"{path} exists; not overwritten")
        directory.mkdir(parents=True, exist_ok=True)
        path.write_text(scaffold(name, account_id, region, cluster_name))
    except OSError as e:
        raise InvalidEnvironment(f"{e.filename or root}: {_short(e.strerror or e)}") from None
    written.append(path)
    try:
        load_environment(path)
    except InvalidEnvironment:
        path.unlink()
        raise
    return written
