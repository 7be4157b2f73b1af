"""`karpy convert`: v1beta1 NodePool/EC2NodeClass and v1alpha5 Provisioner / v1alpha1 AWSNodeTemplate -> v1.

Field moves follow Karpenter's v1 migration: kubelet settings move from the NodePool to its EC2NodeClass, expireAfter
moves into the template, WhenUnderutilized becomes WhenEmptyOrUnderutilized, nodeClassRef gains group and kind, and an
amiFamily without selector terms becomes an amiSelectorTerms alias. Whatever has no v1 form is reported, never dropped
silently.
"""

from __future__ import annotations

import copy
from typing import Any

from controller.api.documents import Document

V1 = "karpenter.sh/v1"
AWS_V1 = "karpenter.k8s.aws/v1"
NODECLASS_REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass"}
ALIASES = {"AL2": "al2", "AL2023": "al2023", "Bottlerocket": "bottlerocket", "Windows2019": "windows2019",
           "Windows2022": "windows2022"}


class ConvertError(ValueError):
    """Input convert cannot turn into v1, or v1 output that `karpy validate` would refuse; one line per problem."""


class _Converter:
    def __init__(self, docs: list[Document]) -> None:
        self.docs = docs
        self.leftovers: list[str] = []
        self.kubelet_for: dict[str, tuple[dict[str, Any], str]] = {}  # nodeclass name -> kubelet, from which pool
        self.origins: list[Document] = []  # the input document of each output manifest

    def left(self, doc: Document, path: str, reason: str) -> None:
        self.leftovers.append(f"{doc.ref}: {path}: {reason}")

    def _meta(self, raw: dict[str, Any]) -> dict[str, Any]:
        meta = copy.deepcopy(raw.get("metadata") or {})
        for k in ("resourceVersion", "uid", "generation", "creationTimestamp", "managedFields"):
            meta.pop(k, None)
        return meta

    def _unknown(self, doc: Document, spec: dict[str, Any], known: set[str], prefix: str) -> None:
        for k in spec:
            if k not in known:
                self.left(doc, f"{prefix}.{k}", "no v1 equivalent")

    def nodepool_v1beta1(self, doc: Document) -> dict[str, Any]:
        raw = doc.raw
        spec = copy.deepcopy(raw.get("spec") or {})
        template = spec.get("template") or {}
        tspec = template.get("spec") or {}
        disruption = spec.get("disruption") or {}
        out_tspec: dict[str, Any] = {}
        for k in ("taints", "startupTaints", "requirements", "terminationGracePeriod"):
            if k in tspec:
                out_tspec[k] = tspec[k]
        ref = tspec.get("nodeClassRef") or {}
        out_tspec["nodeClassRef"] = {**NODECLASS_REF, "name": ref.get("name", "default")}
        if ref.get("kind") not in (None, "EC2NodeClass"):
            self.left(doc, "spec.template.spec.nodeClassRef.kind", f"{ref.get('kind')} is not an EC2NodeClass")
        if "kubelet" in tspec:
            self.kubelet_for[out_tspec["nodeClassRef"]["name"]] = (tspec["kubelet"], doc.ref)
        if "resources" in tspec:
            self.left(doc, "spec.template.spec.resources", "removed in v1 (requests come from the pods)")
        self._unknown(doc, tspec, {"taints", "startupTaints", "requirements", "nodeClassRef", "kubelet", "resources",
                                   "terminationGracePeriod"}, "spec.template.spec")
        if "expireAfter" in disruption:
            out_tspec["expireAfter"] = disruption.pop("expireAfter")
        out_disruption: dict[str, Any] = {}
        policy = disruption.get("consolidationPolicy")
        if policy:
            out_disruption["consolidationPolicy"] = ("WhenEmptyOrUnderutilized" if policy == "WhenUnderutilized"
                                                     else policy)
        if "consolidateAfter" in disruption:
            out_disruption["consolidateAfter"] = disruption["consolidateAfter"]
        elif policy == "WhenUnderutilized":
            out_disruption["consolidateAfter"] = "0s"
        if "budgets" in disruption:
            out_disruption["budgets"] = disruption["budgets"]
        out_spec: dict[str, Any] = {"template": {"spec": out_tspec}}
        if template.get("metadata"):
            out_spec["template"]["metadata"] = template["metadata"]
        if out_disruption:
            out_spec["disruption"] = out_disruption
        for k in ("limits", "weight"):
            if k in spec:
                out_spec[k] = spec[k]
        self._unknown(doc, spec, {"template", "disruption", "limits", "weight"}, "spec")
        return {"apiVersion": V1, "kind": "NodePool", "metadata": self._meta(raw), "spec": out_spec}

    def provisioner(self, doc: Document) -> dict[str, Any]:
        raw = doc.raw
        spec = copy.deepcopy(raw.get("spec") or {})
        tspec: dict[str, Any] = {}
        for k in ("requirements", "taints", "startupTaints"):
            if k in spec:
                tspec[k] = spec[k]
        ref = spec.get("providerRef") or {}
        name = ref.get("name") or doc.name
        if "provider" in spec:
            self.left(doc, "spec.provider", "inline provider settings have no v1 form: write an EC2NodeClass "
                                            f"named {name!r} (nodeClassRef points at it)")
        tspec["nodeClassRef"] = {**NODECLASS_REF, "name": name}
        if "kubeletConfiguration" in spec:
            self.kubelet_for[name] = (spec["kubeletConfiguration"], doc.ref)
        ttl_expired = spec.get("ttlSecondsUntilExpired")
        tspec["expireAfter"] = f"{ttl_expired}s" if ttl_expired else "Never"
        meta: dict[str, Any] = {}
        if spec.get("labels"):
            meta["labels"] = spec["labels"]
        if spec.get("annotations"):
            meta["annotations"] = spec["annotations"]
        out_spec: dict[str, Any] = {"template": {"spec": tspec}}
        if meta:
            out_spec["template"]["metadata"] = meta
        if (spec.get("consolidation") or {}).get("enabled"):
            out_spec["disruption"] = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}
        elif spec.get("ttlSecondsAfterEmpty") is not None:
            out_spec["disruption"] = {"consolidationPolicy": "WhenEmpty",
                                      "consolidateAfter": f"{spec['ttlSecondsAfterEmpty']}s"}
        else:
            out_spec["disruption"] = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}
        limits = (spec.get("limits") or {}).get("resources")
        if limits:
            out_spec["limits"] = limits
        if "weight" in spec:
            out_spec["weight"] = spec["weight"]
        self._unknown(doc, spec, {"requirements", "taints", "startupTaints", "providerRef", "provider",
                                  "kubeletConfiguration", "ttlSecondsUntilExpired", "ttlSecondsAfterEmpty", "labels",
                                  "annotations", "consolidation", "limits", "weight"}, "spec")
        return {"apiVersion": V1, "kind": "NodePool", "metadata": self._meta(raw), "spec": out_spec}

    def _alias(self, doc: Document, spec: dict[str, Any], out: dict[str, Any]) -> None:
        family = spec.get("amiFamily")
        if not out.get("amiSelectorTerms"):
            family = family or "AL2"  # the v1beta1 / v1alpha1 default
            if family in ALIASES:
                out["amiSelectorTerms"] = [{"alias": f"{ALIASES[family]}@latest"}]
                out.pop("amiFamily", None)
            else:
                self.left(doc, "spec.amiFamily", f"{family} needs amiSelectorTerms in v1")
                out["amiFamily"] = family
        elif family:
            out["amiFamily"] = family

    def ec2nodeclass_v1beta1(self, doc: Document) -> dict[str, Any]:
        spec = copy.deepcopy(doc.raw.get("spec") or {})
        out = {k: v for k, v in spec.items() if k != "amiFamily"}
        self._alias(doc, spec, out)
        return {"apiVersion": AWS_V1, "kind": "EC2NodeClass", "metadata": self._meta(doc.raw), "spec": out}

    def _selector_terms(self, selector: dict[str, Any], path: str, doc: Document,
                        names: dict[str, str]) -> list[dict[str, Any]]:
        terms: list[dict[str, Any]] = []
        tags = {}
        for k, v in selector.items():
            if k == "aws-ids":
                terms.extend({"id": i.strip()} for i in str(v).split(","))
            elif k in names:
                terms.append({names[k]: v})
            elif k.startswith("aws::"):
                self.left(doc, f"{path}[{k}]", "no v1 equivalent")
            else:
                tags[k] = v
        if tags:
            terms.insert(0, {"tags": tags})
        return terms

    def awsnodetemplate(self, doc: Document) -> dict[str, Any]:
        spec = copy.deepcopy(doc.raw.get("spec") or {})
        out: dict[str, Any] = {}
        out["subnetSelectorTerms"] = self._selector_terms(spec.get("subnetSelector") or {}, "spec.subnetSelector",
                                                          doc, {})
        out["securityGroupSelectorTerms"] = self._selector_terms(spec.get("securityGroupSelector") or {},
                                                                 "spec.securityGroupSelector", doc,
                                                                 {"aws::name": "name"})
        amis = self._selector_terms(spec.get("amiSelector") or {}, "spec.amiSelector", doc,
                                    {"aws::name": "name", "aws::owners": "owner"})
        if amis:
            out["amiSelectorTerms"] = amis
        for k in ("instanceProfile", "userData", "tags", "metadataOptions", "blockDeviceMappings",
                  "detailedMonitoring"):
            if k in spec:
                out[k] = spec[k]
        self._alias(doc, spec, out)
        if "launchTemplate" in spec:
            self.left(doc, "spec.launchTemplate", "launch templates are not supported in v1: express it as "
                                                  "EC2NodeClass fields")
        if not out.get("instanceProfile"):
            self.left(doc, "spec", "v1 needs role (or instanceProfile): add the node role name")
        self._unknown(doc, spec, {"subnetSelector", "securityGroupSelector", "amiSelector", "amiFamily",
                                  "instanceProfile", "userData", "tags", "metadataOptions", "blockDeviceMappings",
                                  "detailedMonitoring", "launchTemplate", "context"}, "spec")
        return {"apiVersion": AWS_V1, "kind": "EC2NodeClass", "metadata": self._meta(doc.raw), "spec": out}

    def convert(self, doc: Document) -> dict[str, Any] | None:
        key = (doc.api_version, doc.kind)
        if key == ("karpenter.sh/v1beta1", "NodePool"):
            return self.nodepool_v1beta1(doc)
        if key == ("karpenter.k8s.aws/v1beta1", "EC2NodeClass"):
            return self.ec2nodeclass_v1beta1(doc)
        if key == ("karpenter.sh/v1alpha5", "Provisioner"):
            return self.provisioner(doc)
        if key == ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate"):
            return self.awsnodetemplate(doc)
        if doc.kind in ("NodeClaim", "Machine") and doc.api_version in ("karpenter.sh/v1beta1",
                                                                        "karpenter.sh/v1alpha5"):
            self.left(doc, "", "NodeClaims/Machines are created by Karpenter; not converted")
            return None
        return copy.deepcopy(doc.raw)

    def run(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for doc in self.docs:
            try:
                converted = self.convert(doc)
            except (AttributeError, TypeError, KeyError, ValueError) as e:
                # a field of the wrong type (spec: 5, a list for a map): the old schema's shape is not there
                raise ConvertError(f"{doc.ref}: not a {doc.api_version} {doc.kind} karpy can convert: a field has the "
                                   f"wrong type ({type(e).__name__}: {str(e)[:100]})") from None
            if converted is not None:
                out.append(converted)
                self.origins.append(doc)
        # kubelet settings move onto the EC2NodeClass the pool references
        for name, (kubelet, source) in self.kubelet_for.items():
            target = next((m for m in out if m.get("kind") == "EC2NodeClass"
                           and (m.get("metadata") or {}).get("name") == name), None)
            if target is None:
                self.leftovers.append(f"{source}: kubelet: moves to EC2NodeClass {name!r} in v1, which is not in the "
                                      f"input: add spec.kubelet there")
            else:
                existing = target["spec"].get("kubelet")
                if existing and existing != kubelet:
                    self.leftovers.append(f"{source}: kubelet: EC2NodeClass {name!r} is used by pools with different "
                                          "kubelet settings: split the EC2NodeClass")
                else:
                    target["spec"]["kubelet"] = kubelet
        return out


def convert_documents(docs: list[Document]) -> tuple[list[dict[str, Any]], list[str]]:
    """v1 manifests for the input, and every field that has no v1 form ("file: Kind/name: path: reason")."""
    conv = _Converter(docs)
    manifests = conv.run()
    return manifests, conv.leftovers


def convert_and_validate(docs: list[Document]) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """convert_documents, plus what `karpy validate` would say about the output: each error named after the input
    document it came from ("file: document N Kind/name: path: message (in the v1 output)"). Convert must not print
    v1 that does not validate."""
    from controller.api.shapes import shape_errors
    from controller.api.validation import validate_document

    conv = _Converter(docs)
    manifests = conv.run()
    errors: list[str] = []
    for origin, manifest in zip(conv.origins, manifests, strict=True):
        raw_meta = manifest.get("metadata")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        out = Document(source=origin.source, index=origin.index, api_version=str(manifest.get("apiVersion") or ""),
                       kind=str(manifest.get("kind") or ""), name=str(meta.get("name") or origin.name),
                       namespace=meta.get("namespace"), raw=manifest, position=origin.position)
        errors.extend(f"{e} (in the v1 output)" for e in validate_document(out))
        errors.extend(f"{e} (in the output)" for e in shape_errors(out))
    return manifests, conv.leftovers, errors
