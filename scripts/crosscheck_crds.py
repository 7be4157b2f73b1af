"""Run the validation case table (tests/unit/test_validation_cases.py) through Karpenter's own CRDs and through
karpy's, and print every case where the two apiservers' verdicts differ.

    python scripts/crosscheck_crds.py KARPENTER_CRD.yaml...

Give the NodePool, NodeClaim and EC2NodeClass CRDs of a Karpenter release (pkg/apis/crds/ of
kubernetes-sigs/karpenter and aws/karpenter-provider-aws); nothing of Karpenter is bundled here. Exits 1 when a
verdict differs, 0 otherwise. Needs the dev extra (cel-expr-python).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.api.crdeval import CRDEvaluator, compile_errors
from controller.api.crds import crd_manifests
from tests.unit.test_validation_cases import CASES


def main(paths: list[str]) -> int:
    theirs: dict[str, CRDEvaluator] = {}
    for path in paths:
        for crd in yaml.safe_load_all(Path(path).read_text()):
            if crd and crd.get("kind") == "CustomResourceDefinition":
                for err in compile_errors(crd):
                    print(f"{path}: rule does not compile: {err}")
                theirs[crd["spec"]["names"]["kind"]] = CRDEvaluator(crd)
    ours = {crd["spec"]["names"]["kind"]: CRDEvaluator(crd) for crd in crd_manifests()}
    differ = checked = 0
    for case in CASES:
        if case.kind not in theirs:
            continue
        versions: list[tuple[dict[str, Any], dict[str, Any] | None]] = [(case.document(), None)]
        if case.update is not None:
            versions.append((case.document({**case.changes, **case.update}), case.document()))
        for raw, old in versions:
            checked += 1
            if old is None:
                a, b = theirs[case.kind].create(raw)[1], ours[case.kind].create(raw)[1]
            else:
                a = theirs[case.kind].update(theirs[case.kind].create(old)[0], raw)[1]
                b = ours[case.kind].update(ours[case.kind].create(old)[0], raw)[1]
            if bool(a) != bool(b):
                differ += 1
                print(f"{case.kind}: {case.name}{' (update)' if old else ''}")
                print(f"  Karpenter: {[str(e)[:160] for e in a] or 'admitted'}")
                print(f"  karpy:     {[str(e)[:160] for e in b] or 'admitted'}")
    print(f"{checked} checks over {sorted(theirs)}: {differ} verdict(s) differ")
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__.strip())
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
