"""The EC2NodeClass status controller, as Karpenter's nodeclass controller: resolve subnets, security groups, AMIs and
the instance profile into `status` with their conditions and Ready, refresh every minute; on delete, wait for the
NodeClaims that use the class, then delete the instance profile karpy made and the class's launch templates.

Launches read the resolved status (AWSCloudProvider.create), so EC2 and IAM are asked once a minute per class rather
than once per launch. As Karpenter's nodeclass hash controller, the class carries the `ec2nodeclass-hash` and
`-hash-version` annotations of its current spec (controller.api.nodeclasshash), and when the hash version changes the
NodeClaims of the class are re-stamped with the new hash instead of reading as drifted.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from controller.api import conditions as C
from controller.api.models import ami_family
from controller.api.validation import spec_errors
from controller.cloud.aws import capacityreservations
from controller.cloud.aws.amis import AMI, alias_parameters, newest_per_requirements, resolve
from controller.cloud.aws.discovery import discover_security_groups
from controller.cloud.aws.instanceprofiles import profile_name
from controller.cloud.aws.tags import ownership_tags
from controller.cloud.aws.userdata import missing_cluster_fact
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import NotFoundError
from controller.kube.events import Recorder
from controller.kube.workqueue import Result
from controller.logs import pretty_names
from controller.nodeclass.hash import reconcile_hash
from controller.nodeclass.validation import DryRunValidator, TransientValidationError
from controller.state.cluster import Cluster

log = logging.getLogger("karpy.nodeclass")

TERMINATION_FINALIZER = "karpenter.k8s.aws/termination"
SUBNETS_READY = "SubnetsReady"
SECURITY_GROUPS_READY = "SecurityGroupsReady"
AMIS_READY = "AMIsReady"
INSTANCE_PROFILE_READY = "InstanceProfileReady"
VALIDATION_SUCCEEDED = "ValidationSucceeded"
READY = "Ready"
DEPENDENTS = (AMIS_READY, SUBNETS_READY, SECURITY_GROUPS_READY, INSTANCE_PROFILE_READY, VALIDATION_SUCCEEDED)
CAPACITY_RESERVATIONS_READY = "CapacityReservationsReady"  # a dependent of Ready with the ReservedCapacity gate
REFRESH_SECONDS = 60.0
_MISSING_IMAGE_CODES = frozenset({"InvalidAMIID.NotFound", "InvalidAMIID.Malformed", "InvalidAMIID.Unavailable"})
# IAM answers that no retry will change: the condition says so instead of the controller backing off
_PERMANENT_IAM_CODES = frozenset({"NoSuchEntity", "ValidationError", "AccessDenied", "AccessDeniedException",
                                  "InvalidInput", "MalformedPolicyDocument", "LimitExceeded"})


@dataclass
class _Outcome:
    """One dependent's result: status fields to write, and its condition (ready, reason, message)."""

    fields: dict[str, Any]
    ready: bool
    reason: str = ""
    message: str = ""


def _compact(entry: dict[str, Any]) -> dict[str, Any]:
    """Without empty strings: the apiserver (1.20) stores "" in a merge-patched custom resource as null."""
    return {k: v for k, v in entry.items() if v != ""}


def _ref(name: str) -> dict[str, Any]:
    return {"EC2NodeClass": {"name": name}, "controller": "nodeclass"}


class NodeClassController:
    """Reconciles one EC2NodeClass by name: finalizer, resolved status and conditions, or cleanup on delete."""

    def __init__(self, cluster: Cluster, client: KubeClient, provider: Any, recorder: Recorder, *,
                 refresh_seconds: float = REFRESH_SECONDS, finalize_poll_seconds: float = 5.0,
                 clock: Callable[[], float] = time.time, dry_run: bool = True,
                 reserved_capacity: bool = True) -> None:
        """`provider` is the AWSCloudProvider: its EC2/SSM clients, instance profiles and Kubernetes version;
        `dry_run` False (DISABLE_DRY_RUN) skips the permission checks of the validation."""
        self.cluster = cluster
        self.client = client
        self.provider = provider
        self.recorder = recorder
        self.refresh_seconds = refresh_seconds
        # the class is re-checked this often while NodeClaims still use it (NodeClaim deletions do not enqueue it)
        self.finalize_poll_seconds = finalize_poll_seconds
        self.clock = clock
        self.validator = DryRunValidator(provider.ec2) if dry_run else None
        # the ReservedCapacity gate: capacity reservations resolved, and their condition part of Ready
        self.reserved_capacity = reserved_capacity
        self.dependents = (*DEPENDENTS, CAPACITY_RESERVATIONS_READY) if reserved_capacity else DEPENDENTS

    # ---- entry point -------------------------------------------------------------------------------------------
    def reconcile(self, name: str) -> Result:
        """One pass: finalize a deleted class, else add the finalizer and write the resolved status."""
        try:
            nodeclass = self.client.get(R.EC2NODECLASSES, name)
        except NotFoundError:
            return Result()
        meta = nodeclass.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return self._finalize(nodeclass)
        if TERMINATION_FINALIZER not in (meta.get("finalizers") or []):
            try:
                nodeclass = self.client.patch(R.EC2NODECLASSES, name, {"metadata": {
                    "finalizers": [*(meta.get("finalizers") or []), TERMINATION_FINALIZER],
                    "resourceVersion": meta.get("resourceVersion")}})
            except NotFoundError:
                return Result()
        nodeclass = reconcile_hash(self.client, self.cluster, nodeclass)
        return self._resolve_status(nodeclass)

    # ---- status ------------------------------------------------------------------------------------------------
    def _resolve_status(self, nodeclass: dict[str, Any]) -> Result:
        name = nodeclass["metadata"]["name"]
        spec = nodeclass.get("spec") or {}
        generation = nodeclass["metadata"].get("generation")
        stored = nodeclass.get("status") or {}
        status = copy.deepcopy(stored)
        errors: list[BaseException] = []
        outcomes: dict[str, _Outcome] = {}
        for condition, step in ((AMIS_READY, self._amis), (SUBNETS_READY, self._subnets),
                                (SECURITY_GROUPS_READY, self._security_groups),
                                (INSTANCE_PROFILE_READY, self._instance_profile)):
            try:
                outcomes[condition] = step(name, spec)
            except (ClientError, BotoCoreError) as e:  # a transient AWS error: keep what status has, back off
                errors.append(e)
                log.error("resolving %s failed", condition, extra={**_ref(name), "error": str(e)[:300]})
        if self.reserved_capacity:
            try:
                reservations = capacityreservations.resolve(
                    self.provider.ec2, spec.get("capacityReservationSelectorTerms") or [], dt.datetime.now(dt.UTC),
                    getattr(self.provider, "reservations", None))
                outcomes[CAPACITY_RESERVATIONS_READY] = _Outcome({"capacityReservations": reservations or None}, True)
            except (ClientError, BotoCoreError) as e:
                errors.append(e)
                log.error("resolving %s failed", CAPACITY_RESERVATIONS_READY,
                          extra={**_ref(name), "error": str(e)[:300]})
        else:
            status.pop("capacityReservations", None)
        for condition, outcome in outcomes.items():
            status.update(outcome.fields)
            C.set_condition(status, condition, outcome.ready, outcome.reason or condition, outcome.message,
                            generation=generation)
        failed = [c for c in DEPENDENTS[:-1] if (C.get(status, c) or {}).get("status") == "False"]
        kubelet = spec_errors(nodeclass, "spec.kubelet")
        if kubelet:  # Karpenter's controller checks the open kubelet map before anything else
            C.set_condition(status, VALIDATION_SUCCEEDED, False, "InvalidKubeletConfiguration",
                            "; ".join(kubelet)[:1000], generation=generation)
        elif failed:
            C.set_condition(status, VALIDATION_SUCCEEDED, False, "DependenciesNotReady",
                            ", ".join(f"{c}=False" for c in failed), generation=generation)
        elif all(C.is_true(status, c) for c in DEPENDENTS[:-1]):
            self._validate(name, spec, status, generation)
        self._set_ready(status, generation)
        for k in [k for k, v in status.items() if v is None]:
            if k not in stored:
                del status[k]
        if status != stored:
            self._write_status(nodeclass, status)
            ready = C.get(status, READY) or {}
            if ready.get("status") != (C.get(stored, READY) or {}).get("status"):
                log.info("nodeclass %s", "ready" if ready.get("status") == "True" else "not ready",
                         extra={**_ref(name), "reason": ready.get("reason"), "condition-message": ready.get("message")})
        if errors:
            raise errors[0]
        return Result(requeue_after=self.refresh_seconds)

    def _validate(self, name: str, spec: dict[str, Any], status: dict[str, Any], generation: int | None) -> None:
        """ValidationSucceeded from the dry runs of the launch calls (True without them when dry runs are off); a
        dry run AWS could not answer leaves the condition as it was, for the next pass."""
        if self.validator is None:
            C.set_condition(status, VALIDATION_SUCCEEDED, True, VALIDATION_SUCCEEDED, generation=generation)
            return
        tags = ownership_tags(self.provider.cluster.name, nodeclass=name, user_tags=spec.get("tags") or {})
        try:
            verdict = self.validator.validate(name, spec, status, tags)
        except TransientValidationError as e:
            log.error("validating nodeclass failed", extra={**_ref(name), "error": str(e)[:300]})
            return
        if verdict.ok:
            C.set_condition(status, VALIDATION_SUCCEEDED, True, VALIDATION_SUCCEEDED, generation=generation)
        else:
            C.set_condition(status, VALIDATION_SUCCEEDED, False, verdict.reason, verdict.message,
                            generation=generation)

    def _set_ready(self, status: dict[str, Any], generation: int | None) -> None:
        """Ready is True when every dependent is; else False with the first failing dependent's reason and every
        failing dependent's message, or Unknown while some are not resolved yet."""
        conds = {c: C.get(status, c) or {} for c in self.dependents}
        false = [conds[c] for c in self.dependents if conds[c].get("status") == "False"]
        if false:
            real = [c for c in false if c.get("reason") != "DependenciesNotReady"] or false
            C.set_condition(status, READY, False, str(real[0].get("reason") or "UnhealthyDependents"),
                            "; ".join(str(c.get("message") or f"{c.get('type')}=False") for c in real),
                            generation=generation)
        elif all(conds[c].get("status") == "True" for c in self.dependents):
            C.set_condition(status, READY, True, READY, generation=generation)
        else:
            C.set_condition(status, READY, None, "AwaitingReconciliation",
                            "object is awaiting reconciliation", generation=generation)

    def _write_status(self, nodeclass: dict[str, Any], status: dict[str, Any]) -> None:
        name = nodeclass["metadata"]["name"]
        body: dict[str, Any] = {"metadata": {"resourceVersion": nodeclass["metadata"].get("resourceVersion")},
                                "status": status}
        for k in (nodeclass.get("status") or {}):  # merge patch: null removes a field the status no longer has
            if k not in status:
                body["status"][k] = None
        try:
            self.client.patch(R.EC2NODECLASSES, name, body, subresource="status")
        except NotFoundError:
            return

    def _subnets(self, name: str, spec: dict[str, Any]) -> _Outcome:
        # described through the subnet provider: launches then count on these free addresses
        subnets = self.provider.subnets.describe(self.provider.ec2, spec.get("subnetSelectorTerms") or [])
        if not subnets:
            return _Outcome({"subnets": None}, False, "SubnetsNotFound", "SubnetSelector did not match any Subnets")
        # most free IP addresses first (ties by id): launches take, per zone, the first subnet of the list
        ordered = sorted(subnets, key=lambda s: (-s.available_ips, s.id))
        return _Outcome({"subnets": [_compact({"id": s.id, "zone": s.zone, "zoneID": s.zone_id}) for s in ordered]},
                        True)

    def _security_groups(self, name: str, spec: dict[str, Any]) -> _Outcome:
        terms = spec.get("securityGroupSelectorTerms") or []
        groups = discover_security_groups(self.provider.ec2, terms)
        if not groups and terms:
            return _Outcome({"securityGroups": None}, False, "SecurityGroupsNotFound",
                            "SecurityGroupSelector did not match any SecurityGroups")
        return _Outcome({"securityGroups": [_compact({"id": g.id, "name": g.name}) for g in groups]}, True)

    def _amis(self, name: str, spec: dict[str, Any]) -> _Outcome:
        terms = spec.get("amiSelectorTerms") or []
        for term in terms:
            if term.get("alias"):
                try:
                    alias_parameters(term["alias"], self.provider.k8s_version)
                except ValueError as e:
                    return _Outcome({}, False, "UnsupportedAlias", str(e))
        amis = self._resolve_amis(terms)
        if not amis:
            return _Outcome({"amis": None}, False, "AMINotFound", "AMISelector did not match any AMIs")
        resolved = {"amis": [_compact({"id": a.id, "name": a.name, "requirements": [
            {"key": k, "operator": op, **({"values": list(v)} if v else {})} for k, op, v in a.all_requirements()]})
            for a in amis]}
        facts = getattr(self.provider, "facts", None)
        missing = missing_cluster_fact(ami_family(spec), facts()) if facts is not None else ""
        if missing:  # the family's bootstrap cannot be written: nothing launches until the fact is known
            return _Outcome(resolved, False, "ClusterFactUnresolved", missing)
        return _Outcome(resolved, True)

    def _resolve_amis(self, terms: list[dict[str, Any]]) -> list[AMI]:
        """The best AMI per requirement set the terms select; an image id that does not exist selects nothing (EC2
        refuses the whole DescribeImages call for it, so the terms are then resolved one by one)."""
        try:
            return resolve(self.provider.ec2, self.provider.ssm, terms, self.provider.k8s_version)
        except ValueError:
            return []
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") not in _MISSING_IMAGE_CODES:
                raise
        found: list[AMI] = []
        for term in terms:
            try:
                found += resolve(self.provider.ec2, self.provider.ssm, [term], self.provider.k8s_version)
            except ValueError:
                continue
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") in _MISSING_IMAGE_CODES:
                    continue
                raise
        return newest_per_requirements(found)

    def _instance_profile(self, name: str, spec: dict[str, Any]) -> _Outcome:
        if spec.get("instanceProfile"):
            return _Outcome({"instanceProfile": spec["instanceProfile"]}, True)
        role = str(spec.get("role") or "")
        if not role:
            return _Outcome({"instanceProfile": None}, False, "InstanceProfileNotFound",
                            "neither role nor instanceProfile is set")
        try:
            profile = self.provider.profiles.ensure(name, role)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") not in _PERMANENT_IAM_CODES:
                raise
            return _Outcome({}, False, "InstanceProfileCreationFailed",
                            f"creating instance profile for role {role}: {str(e)[:300]}")
        return _Outcome({"instanceProfile": profile}, True)

    # ---- deletion ----------------------------------------------------------------------------------------------
    def _finalize(self, nodeclass: dict[str, Any]) -> Result:
        meta = nodeclass["metadata"]
        name = meta["name"]
        finalizers = list(meta.get("finalizers") or [])
        if TERMINATION_FINALIZER not in finalizers:
            return Result()
        claims = sorted(c["metadata"]["name"] for c in self.cluster.nodeclaims_for_nodeclass(name))
        if claims:
            self.recorder.publish(nodeclass, "Normal", "WaitingOnNodeClaimTermination",
                                  f"Waiting on NodeClaim termination for {pretty_names(claims)}")
            return Result(requeue_after=self.finalize_poll_seconds)
        spec = nodeclass.get("spec") or {}
        managed = profile_name(self.provider.cluster.name, self.provider.region, name)
        if spec.get("instanceProfile") != managed:  # never delete a profile the user brought, even by that name
            self.provider.profiles.delete(name)
        deleted = self.provider.delete_launch_templates(name)
        if deleted:
            log.info("deleted launch templates", extra={**_ref(name), "launchTemplates": pretty_names(deleted)})
        finalizers.remove(TERMINATION_FINALIZER)
        with contextlib.suppress(NotFoundError):
            self.client.patch(R.EC2NODECLASSES, name, {"metadata": {
                "finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")}})
        return Result()
