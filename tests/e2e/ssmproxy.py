"""A pass-through HTTP proxy in front of LocalStack that stands in for AWS's public SSM parameters, for a
`karpy controller` process (its AWS_ENDPOINT_URL points here).

LocalStack refuses to store parameters under `/aws/service/` (the namespace AWS reserves for its public ones, such as
the EKS optimized AMI ids an `al2023@latest` alias resolves through), so:

- SSM GetParameter / GetParameters for a name under `/aws/service/` is answered by the proxy: the value it was given
  for that name, or ParameterNotFound (as AWS answers for a variant that is not published, e.g. no arm64 build);
  every such name asked is remembered, in order.
- Each CreateFleet request's form is remembered (then relayed), so a test can read which launch templates and
  instance types one launch offered EC2.
- Every other request (SSM under other names, EC2, SQS, IAM, STS...) goes through EC2Proxy, which relays it to
  LocalStack unchanged (it is given no capacity reservations, so it adds nothing to EC2's answers).
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.parse
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.e2e.ec2proxy import EC2Proxy

PUBLIC = "/aws/service/"
JSON = "application/x-amz-json-1.1"


class PublicParameterProxy(EC2Proxy):
    """Relays to `upstream`, answering SSM reads of `/aws/service/...` names from `public` (name -> value)."""

    def __init__(self, upstream: str, ec2: Any, public: Mapping[str, str]) -> None:
        super().__init__(upstream, {}, ec2)
        self.public = dict(public)
        self.names_asked: list[str] = []  # the /aws/service/ names read, in order
        self.fleets: list[dict[str, list[str]]] = []  # the CreateFleet forms, in order

    def handle(self, req: BaseHTTPRequestHandler, body: bytes) -> None:
        target = req.headers.get("X-Amz-Target") or ""
        if target in ("AmazonSSM.GetParameter", "AmazonSSM.GetParameters"):
            try:
                payload = json.loads(body or b"{}")
            except ValueError:
                payload = {}
            names = [payload.get("Name")] if target.endswith("GetParameter") else payload.get("Names") or []
            if names and all(isinstance(n, str) and n.startswith(PUBLIC) for n in names):
                with self._lock:
                    self.asked.append(target.rsplit(".", 1)[1])
                    self.names_asked.extend(names)
                self._answer(req, target.endswith("GetParameter"), names)
                return
        elif b"Action=CreateFleet" in body:
            with self._lock:
                self.fleets.append(urllib.parse.parse_qs(body.decode(), keep_blank_values=True))
        super().handle(req, body)

    def _parameter(self, name: str) -> dict[str, Any]:
        return {"Name": name, "Type": "String", "Value": self.public[name], "Version": 1, "DataType": "text",
                "LastModifiedDate": dt.datetime.now(dt.UTC).timestamp(),
                "ARN": f"arn:aws:ssm:us-east-1::parameter{name}"}

    def _answer(self, req: BaseHTTPRequestHandler, single: bool, names: list[str]) -> None:
        out: dict[str, Any]
        if single:
            name = names[0]
            if name in self.public:
                status, out = 200, {"Parameter": self._parameter(name)}
            else:
                status, out = 400, {"__type": "ParameterNotFound", "message": f"Parameter {name} not found."}
        else:
            status, out = 200, {"Parameters": [self._parameter(n) for n in names if n in self.public],
                                "InvalidParameters": [n for n in names if n not in self.public]}
        self._reply(req, status, {"Content-Type": JSON}, json.dumps(out).encode())
