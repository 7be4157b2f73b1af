"""EC2NodeClass validation by dry run against LocalStack and the real control plane: the CreateLaunchTemplate,
CreateFleet and RunInstances dry runs reach LocalStack's EC2, which answers DryRunOperation (allowed) and creates
nothing; a missing permission shows as ValidationSucceeded=False (and Ready=False) with Karpenter's reason before any
launch; DISABLE_DRY_RUN skips the calls.

LocalStack does not enforce IAM, so the refusal is an UnauthorizedOperation put in place of LocalStack's answer to
the CreateFleet dry run with a botocore hook, worded as EC2 words it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from controller.kube import resources as R
from controller.nodeclass.status import NodeClassController
from controller.nodeclass.validation import CREATE_FLEET_AUTH_FAILED, validation_template_name
from tests.integration.test_nodeclass_status import _conditions, _delete_quietly, _nodeclass, world  # noqa: F401

pytestmark = [pytest.mark.localstack, pytest.mark.kube,
              pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


class DryRuns:
    """Records the dry-run calls; refuses CreateFleet's as EC2 does without ec2:CreateFleet when `refuse`."""

    def __init__(self, ec2: Any, refuse: bool) -> None:
        self.ec2, self.refuse, self.calls = ec2, refuse, []  # type: ignore[var-annotated]

    def __enter__(self) -> DryRuns:
        self.ec2.meta.events.register("provide-client-params.ec2.*", self.record)
        self.ec2.meta.events.register("before-call.ec2.CreateFleet", self.unauthorized)
        return self

    def __exit__(self, *exc: object) -> None:
        self.ec2.meta.events.unregister("before-call.ec2.CreateFleet", self.unauthorized)
        self.ec2.meta.events.unregister("provide-client-params.ec2.*", self.record)

    def record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if params.get("DryRun"):
            self.calls.append(model.name)

    def unauthorized(self, **_: Any) -> Any:
        if not self.refuse:
            return None
        body = {"Error": {"Code": "UnauthorizedOperation",
                          "Message": "You are not authorized to perform this operation."}}
        return AWSResponse("https://ec2", 403, {}, None), {**body, "ResponseMetadata": {"HTTPStatusCode": 403}}


def test_dry_runs_validate_and_a_missing_permission_shows_before_any_launch(kube, world):  # noqa: F811
    kc, cluster, recorder = kube
    provider, template = world
    ec2 = provider.ec2
    allowed, refused = f"nc-{uuid.uuid4().hex[:6]}", f"nc-{uuid.uuid4().hex[:6]}"
    for name in (allowed, refused):
        kc.create(R.EC2NODECLASSES, _nodeclass(name, template))
    ctl = NodeClassController(cluster=cluster, client=kc, provider=provider, recorder=recorder)
    try:
        with DryRuns(ec2, refuse=False) as runs:
            ctl.reconcile(allowed)
        assert runs.calls == ["CreateLaunchTemplate", "CreateFleet", "RunInstances"]
        conditions = _conditions(kc.get(R.EC2NODECLASSES, allowed))
        assert conditions["ValidationSucceeded"][0] == "True" and conditions["Ready"][0] == "True"
        # no capacityReservationSelectorTerms: nothing asked, the condition True (a dependent of Ready)
        assert conditions["CapacityReservationsReady"][0] == "True"
        assert "capacityReservations" not in kc.get(R.EC2NODECLASSES, allowed)["status"]
        # dry runs create nothing
        found = ec2.describe_launch_templates(Filters=[{"Name": "launch-template-name",
                                                        "Values": [validation_template_name(allowed)]}])
        assert found["LaunchTemplates"] == []
        # the verdict is kept: the next pass makes no calls
        with DryRuns(ec2, refuse=False) as runs:
            ctl.reconcile(allowed)
        assert runs.calls == []

        with DryRuns(ec2, refuse=True) as runs:
            ctl.reconcile(refused)
        assert runs.calls == ["CreateLaunchTemplate", "CreateFleet"]  # stops at the first refusal
        conditions = _conditions(kc.get(R.EC2NODECLASSES, refused))
        status, reason, message = conditions["ValidationSucceeded"]
        assert (status, reason) == ("False", CREATE_FLEET_AUTH_FAILED)
        assert "isn't authorized to call ec2:CreateFleet" in message
        assert conditions["Ready"][:2] == ("False", CREATE_FLEET_AUTH_FAILED)

        # DISABLE_DRY_RUN: valid without a call
        off = NodeClassController(cluster=cluster, client=kc, provider=provider, recorder=recorder, dry_run=False)
        with DryRuns(ec2, refuse=True) as runs:
            off.reconcile(refused)
        assert runs.calls == []
        assert _conditions(kc.get(R.EC2NODECLASSES, refused))["ValidationSucceeded"][0] == "True"
    finally:
        for name in (allowed, refused):
            _delete_quietly(kc, name)
