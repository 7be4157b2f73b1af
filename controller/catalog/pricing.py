"""Prices for the offline catalog snapshot.

LocalStack emulates EC2 but not the AWS Pricing API, so the snapshot that `karpy simulate` ships with carries
ESTIMATED prices from the model below, labelled as estimates in the file and in simulate's output. The controller
uses live prices (Pricing API + spot price history) from controller.cloud.aws.

The model (us-east-1, Linux, shared tenancy, USD per hour):
  on-demand = (vCPU x 0.0370 + GiB x 0.00275) x family factor + accelerators
  where 0.0370/vCPU and 0.00275/GiB are solved from the published m5.large ($0.096) and c5.large ($0.085) prices;
  family factor: AMD 0.90, Graviton 0.80 (0.85 from generation 7), Intel generation >= 7 1.05, local NVMe (d) 1.18,
  network-enhanced (n) 1.24, burstable (t) 0.87, high-memory (x, u) 0.75;
  accelerators per device: NVIDIA T4 0.38, A10G 0.75, L4 0.55, L40S 1.45, V100 2.50, A100 3.70, H100 6.90, H200 7.90,
  other NVIDIA 1.00, AWS Inferentia/Trainium 0.23/1.35, other 0.50.
  spot = on-demand x (0.30 ... 0.45), a fixed per (type, zone) fraction from a hash, so zones differ as they do on AWS.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

MODEL_SUMMARY = ("estimated: vCPU/GiB model fitted to published us-east-1 on-demand prices (m5.large, c5.large) with "
                 "family and accelerator factors; spot = 30-45% of on-demand per (type, zone). Not live AWS prices.")
_PER_VCPU = 0.0370
_PER_GIB = 0.00275
_ACCELERATOR = {"t4": 0.38, "a10g": 0.75, "l4": 0.55, "l40s": 1.45, "v100": 2.50, "a100": 3.70, "h100": 6.90,
                "h200": 7.90, "inferentia": 0.23, "inferentia2": 0.23, "trainium": 1.35, "trainium2": 1.35}


@dataclass
class PriceTable:
    """On-demand price per instance type and spot price per (instance type, zone)."""

    on_demand: dict[str, float] = field(default_factory=dict)
    spot: dict[tuple[str, str], float] = field(default_factory=dict)


def _family_factor(info: dict[str, Any]) -> float:
    family = info["InstanceType"].split(".")[0]
    maker = str((info.get("ProcessorInfo") or {}).get("Manufacturer", "")).lower()
    digits = "".join(ch for ch in family if ch.isdigit())
    generation = int(digits[:1]) if digits else 5
    suffix = family.lstrip("abcdefghijklmnopqrstuvwxyz-").lstrip("0123456789")
    factor = 1.0
    if maker == "amd":
        factor *= 0.90
    elif maker == "aws":
        factor *= 0.85 if generation >= 7 else 0.80
    elif generation >= 7:
        factor *= 1.05
    if "d" in suffix:
        factor *= 1.18
    if "n" in suffix:
        factor *= 1.24
    if family.startswith("t"):
        factor *= 0.87
    if family.startswith(("x", "u")):
        factor *= 0.75
    return factor


def _accelerators(info: dict[str, Any]) -> float:
    total = 0.0
    for gpu in (info.get("GpuInfo") or {}).get("Gpus") or []:
        name = str(gpu.get("Name", "")).lower()
        default = 1.0 if str(gpu.get("Manufacturer", "")).lower() == "nvidia" else 0.5
        total += _ACCELERATOR.get(name, default) * int(gpu.get("Count", 0))
    for dev in ((info.get("NeuronInfo") or {}).get("NeuronDevices") or []):
        total += _ACCELERATOR.get(str(dev.get("Name", "")).lower(), 0.5) * int(dev.get("Count", 0))
    return total


def estimate_on_demand(info: dict[str, Any]) -> float:
    """The model's on-demand $/h for one DescribeInstanceTypes item (see the module docstring)."""
    vcpus = int(info["VCpuInfo"]["DefaultVCpus"])
    gib = int(info["MemoryInfo"]["SizeInMiB"]) / 1024
    return round((vcpus * _PER_VCPU + gib * _PER_GIB) * _family_factor(info) + _accelerators(info), 5)


def spot_fraction(instance_type: str, zone: str) -> float:
    """A stable 0.30-0.45 spot/on-demand ratio for (type, zone)."""
    h = int.from_bytes(hashlib.sha256(f"{instance_type}/{zone}".encode()).digest()[:4], "big")
    return 0.30 + 0.15 * (h / 0xFFFFFFFF)


def estimate_prices(infos: list[dict[str, Any]], zones_by_type: dict[str, list[str]]) -> PriceTable:
    """Estimated on-demand and spot prices for every type in every zone it is offered in."""
    table = PriceTable()
    for info in infos:
        name = info["InstanceType"]
        od = estimate_on_demand(info)
        table.on_demand[name] = od
        if "spot" in (info.get("SupportedUsageClasses") or ["spot"]):
            for zone in zones_by_type.get(name, []):
                table.spot[(name, zone)] = round(od * spot_fraction(name, zone), 5)
    return table
