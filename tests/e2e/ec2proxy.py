"""A pass-through HTTP proxy in front of LocalStack that stands in for the capacity reservation parts of EC2 LocalStack
does not serve, for a `karpy controller` process (its AWS_ENDPOINT_URL points here):

- DescribeCapacityReservations (not implemented by LocalStack) is answered with the proxy's reservations, each with
  its total count less the instances launched into it.
- CreateFleet goes to LocalStack unchanged; when its launch template targets one of the reservations (read back from
  LocalStack), the instances it launched are remembered as running in that reservation.
- DescribeInstances goes to LocalStack; the instances remembered get the reservation EC2 would report
  (capacityReservationId, capacity-reservations-only), which LocalStack never reports.
Every other request (EC2, SQS, SSM, IAM, STS...) is relayed as is.
"""

from __future__ import annotations

import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from xml.sax.saxutils import escape

HOP = {"host", "content-length", "connection", "transfer-encoding", "accept-encoding"}


class EC2Proxy:
    """Relays to `upstream`; reservations: {id: {"InstanceType", "AvailabilityZone", "Total"}}; ec2: a boto3 EC2
    client on the upstream (to read launch templates)."""

    def __init__(self, upstream: str, reservations: dict[str, dict[str, Any]], ec2: Any) -> None:
        self.upstream = upstream.rstrip("/")
        self.reservations = reservations
        self.ec2 = ec2
        self.launched: dict[str, str] = {}  # instance id -> reservation id
        self.asked: list[str] = []  # the actions seen, in order
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.handle(self, body)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _relay

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="ec2-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> EC2Proxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Self:
        """Serving while in the with block."""
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def handle(self, req: BaseHTTPRequestHandler, body: bytes) -> None:
        form: dict[str, list[str]] = {}
        if "x-www-form-urlencoded" in (req.headers.get("Content-Type") or ""):
            form = urllib.parse.parse_qs(body.decode(), keep_blank_values=True)
        action = (form.get("Action") or [""])[0]
        with self._lock:
            self.asked.append(action)
        if action == "DescribeCapacityReservations":
            self._reply(req, 200, {"Content-Type": "text/xml"}, self._reservations_xml(form).encode())
            return
        status, headers, out = self._forward(req, body)
        if action == "CreateFleet" and status == 200:
            self._remember(form, out.decode())
        elif action == "DescribeInstances" and status == 200:
            out = self._inject(out.decode()).encode()
        self._reply(req, status, headers, out)

    def _forward(self, req: BaseHTTPRequestHandler, body: bytes) -> tuple[int, dict[str, str], bytes]:
        headers = {k: v for k, v in req.headers.items() if k.lower() not in HOP}
        up = urllib.request.Request(self.upstream + req.path, data=body if body else None, method=req.command,
                                    headers=headers)
        try:
            with urllib.request.urlopen(up, timeout=60) as resp:
                return resp.status, dict(resp.headers.items()), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers.items()), e.read()

    @staticmethod
    def _reply(req: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
        req.send_response(status)
        for k, v in headers.items():
            if k.lower() not in HOP:
                req.send_header(k, v)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        if req.command != "HEAD":
            req.wfile.write(body)

    def _reservations_xml(self, form: dict[str, list[str]]) -> str:
        wanted = {v[0] for k, v in form.items() if k.startswith("CapacityReservationId.")}
        items = []
        with self._lock:
            used = list(self.launched.values())
        for rid, r in self.reservations.items():
            if wanted and rid not in wanted:
                continue
            available = max(0, int(r["Total"]) - used.count(rid))
            items.append(
                f"<item><capacityReservationId>{escape(rid)}</capacityReservationId>"
                f"<instanceType>{escape(r['InstanceType'])}</instanceType>"
                f"<availabilityZone>{escape(r['AvailabilityZone'])}</availabilityZone>"
                "<ownerId>000000000000</ownerId><instanceMatchCriteria>targeted</instanceMatchCriteria>"
                "<state>active</state><reservationType>default</reservationType>"
                f"<totalInstanceCount>{int(r['Total'])}</totalInstanceCount>"
                f"<availableInstanceCount>{available}</availableInstanceCount></item>")
        return ('<?xml version="1.0" encoding="UTF-8"?><DescribeCapacityReservationsResponse '
                'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>proxy</requestId>'
                f"<capacityReservationSet>{''.join(items)}</capacityReservationSet>"
                "</DescribeCapacityReservationsResponse>")

    def _remember(self, form: dict[str, list[str]], xml: str) -> None:
        names = {v[0] for k, v in form.items() if k.endswith("LaunchTemplateSpecification.LaunchTemplateName")}
        target = ""
        for name in names:
            data = self.ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"][0][
                "LaunchTemplateData"]
            spec = data.get("CapacityReservationSpecification") or {}
            rid = (spec.get("CapacityReservationTarget") or {}).get("CapacityReservationId", "")
            if rid in self.reservations:
                target = rid
        if not target:
            return
        with self._lock:
            for iid in re.findall(r"<item>(i-[0-9a-f]+)</item>", xml):
                self.launched[iid] = target

    def _inject(self, xml: str) -> str:
        with self._lock:
            launched = dict(self.launched)
        for iid, rid in launched.items():
            xml = xml.replace(
                f"<instanceId>{iid}</instanceId>",
                f"<instanceId>{iid}</instanceId><capacityReservationId>{rid}</capacityReservationId>"
                "<capacityReservationSpecification><capacityReservationPreference>capacity-reservations-only"
                "</capacityReservationPreference></capacityReservationSpecification>")
        return xml
