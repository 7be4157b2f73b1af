"""Catalog snapshots: EC2's instance data and offerings per zone, with prices, in one gzip JSON file.

`karpy simulate` runs on a snapshot (bundled: aws-us-east-1, generated from the EC2 data LocalStack serves, with
estimated prices; or one written by `karpy catalog refresh` from a real account), or on the synthetic `benchmark`
catalog. Instance types are rebuilt from the stored EC2 fields, so kubelet settings (maxPods, reservations) of an
EC2NodeClass apply exactly as they would in the controller.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.api import labels as L
from controller.catalog.ec2 import instance_type_from_ec2, trim_info
from controller.catalog.pricing import PriceTable
from controller.catalog.types import InstanceType, Offering

DATA_DIR = Path(__file__).parent / "data"
BUNDLED = {"aws-us-east-1": DATA_DIR / "aws-us-east-1.json.gz"}
SYNTHETIC = ("benchmark",)
FORMAT_VERSION = 1

@dataclass
class Catalog:
    """A region's instance types with offerings, and where their prices come from."""

    name: str
    region: str
    zones: list[str]
    price_source: str
    generated: str
    instance_types: list[InstanceType]
    _infos: list[dict[str, Any]] = field(default_factory=list, repr=False)
    _cache: dict[str, list[InstanceType]] = field(default_factory=dict, repr=False)

    def instance_types_for(self, ami_family: str = "al2023",
                           kubelet: dict[str, Any] | None = None) -> list[InstanceType]:
        """Instance types as an EC2NodeClass with this AMI family and kubelet config would see them."""
        if not kubelet and ami_family == "al2023":
            return self.instance_types
        if not self._infos:  # synthetic catalogs have no EC2 data to recompute from
            return self.instance_types
        key = json.dumps([ami_family, kubelet or {}], sort_keys=True)
        if key not in self._cache:
            by_name = {it.name: it for it in self.instance_types}
            self._cache[key] = [instance_type_from_ec2(info, by_name[info["InstanceType"]].offerings,
                                                       region=self.region, ami_family=ami_family, kubelet=kubelet)
                                for info in self._infos]
        return self._cache[key]


def write_snapshot(path: str | Path, *, region: str, infos: list[dict[str, Any]], zones_by_type: dict[str, list[str]],
                   prices: PriceTable, price_source: str, generated: str) -> int:
    """Write a snapshot file; returns the number of instance types written."""
    types: list[dict[str, Any]] = []
    for info in sorted(infos, key=lambda i: i["InstanceType"]):
        name = info["InstanceType"]
        zones = sorted(zones_by_type.get(name, []))
        if not zones or name not in prices.on_demand:
            continue
        types.append({"info": trim_info(info), "zones": zones, "onDemand": prices.on_demand[name],
                      "spot": {z: prices.spot[(name, z)] for z in zones if (name, z) in prices.spot}})
    doc: dict[str, Any] = {"format": FORMAT_VERSION, "region": region, "generated": generated,
                           "priceSource": price_source, "zones": sorted({z for t in types for z in t["zones"]}),
                           "instanceTypes": types}
    data = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(filename=str(path), mode="wb", mtime=0) as f:
        f.write(data)
    return len(types)


LivePrice = Callable[[str, str | None], float | None]  # (instance type, zone or None for on-demand) -> USD/h


def snapshot_from_ec2(ec2: Any, region: str, path: str | Path, generated: str, live: LivePrice | None = None,
                      live_source: str = "") -> int:
    """Write a snapshot from an EC2 endpoint: DescribeInstanceTypes (types Karpenter supports), their offerings per
    availability zone, and prices: `live` where it knows them, else the estimate model, and the file says which.
    Returns the number of types written."""
    from controller.catalog.ec2 import describe_instance_data
    from controller.catalog.pricing import MODEL_SUMMARY, estimate_prices

    infos, zones = describe_instance_data(ec2)
    prices = estimate_prices(infos, zones)
    source = MODEL_SUMMARY
    if live is not None:
        hits = 0
        for name in list(prices.on_demand):
            price = live(name, None)
            if price is not None:
                prices.on_demand[name] = price
                hits += 1
        for name, zone in list(prices.spot):
            price = live(name, zone)
            if price is not None:
                prices.spot[(name, zone)] = price
                hits += 1
        if hits:
            source = f"{live_source} where available ({hits} prices); the rest {MODEL_SUMMARY}"
    return write_snapshot(path, region=region, infos=infos, zones_by_type=zones, prices=prices, price_source=source,
                          generated=generated)


def _price(value: Any) -> float:
    """A price from a snapshot: a finite, non-negative number."""
    price = float(value)
    if not math.isfinite(price) or price < 0:
        raise ValueError(f"price {str(value)[:20]!r} is not a finite non-negative number")
    return price


def _read(path: Path, name: str) -> Catalog:
    """A snapshot file as a Catalog; anything else (not gzip/JSON, another format, a field of the wrong type) is one
    ValueError line naming the file and, where it can, the entry at fault."""
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, EOFError, zlib.error, ValueError, RecursionError) as e:
        reason = " ".join(str(e).split())[:160]
        raise ValueError(f"{path}: not a readable catalog snapshot: {type(e).__name__}: {reason}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_VERSION or not isinstance(doc.get("instanceTypes"),
                                                                                          list):
        raise ValueError(f"{path}: not a karpy catalog snapshot (format {FORMAT_VERSION} expected)")
    try:
        region = str(doc["region"])
        zones = [str(z) for z in doc["zones"]]
        price_source, generated = str(doc["priceSource"]), str(doc["generated"])
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a karpy catalog snapshot: missing or malformed {str(e)[:60]}") from None
    types: list[InstanceType] = []
    infos: list[dict[str, Any]] = []
    for i, entry in enumerate(doc["instanceTypes"]):
        try:
            info = entry["info"]
            offerings = [Offering(zone=str(z), capacity_type=L.CAPACITY_TYPE_ON_DEMAND, price=_price(entry["onDemand"]))
                         for z in entry["zones"]]
            offerings += [Offering(zone=str(z), capacity_type=L.CAPACITY_TYPE_SPOT, price=_price(p))
                          for z, p in entry["spot"].items()]
            types.append(instance_type_from_ec2(info, offerings, region=region))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError) as e:
            reason = " ".join(str(e).split())[:100]
            raise ValueError(f"{path}: instanceTypes[{i}]: malformed entry ({type(e).__name__}: {reason})") from None
        infos.append(info)
    return Catalog(name=name, region=region, zones=zones, price_source=price_source,
                   generated=generated, instance_types=types, _infos=infos)


def load_prices(name: str = "aws-us-east-1") -> PriceTable:
    """A bundled catalog's prices alone (no instance types built): the controller's fallback until, or where, the
    Pricing API answers."""
    with gzip.open(BUNDLED[name], "rb") as f:
        doc = json.loads(f.read())
    table = PriceTable()
    for entry in doc["instanceTypes"]:
        it = entry["info"]["InstanceType"]
        table.on_demand[it] = float(entry["onDemand"])
        for zone, price in entry["spot"].items():
            table.spot[(it, zone)] = float(price)
    return table


def load_catalog(name_or_path: str = "aws-us-east-1") -> Catalog:
    """A bundled catalog by name (aws-us-east-1, benchmark) or a snapshot file written by write_snapshot."""
    if name_or_path == "benchmark":
        from controller.catalog.synthetic import benchmark_instance_types

        types = benchmark_instance_types()
        zones = sorted({o.zone for it in types for o in it.offerings})
        return Catalog(name="benchmark", region="test-region", zones=zones, generated="synthetic",
                       price_source="synthetic: 0.1 x vCPU + 0.1 x GiB (Karpenter's scheduling benchmark)",
                       instance_types=types)
    if name_or_path in BUNDLED:
        return _read(BUNDLED[name_or_path], name_or_path)
    path = Path(name_or_path)
    if not path.is_file():
        names = ", ".join([*BUNDLED, *SYNTHETIC])
        raise ValueError(f"catalog {name_or_path!r}: neither a bundled catalog ({names}) nor a snapshot file")
    return _read(path, path.name)
