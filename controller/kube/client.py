"""A raw-JSON Kubernetes client: the `kubernetes` package's configuration (kubeconfig, in-cluster, exec plugins) and
its urllib3 pool for transport and auth, but plain dicts in and out, never the generated models (too slow for pods at
scale). Every request passes a token bucket of KUBE_CLIENT_QPS / KUBE_CLIENT_BURST."""

from __future__ import annotations

import builtins
import json
import os
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from controller.kube import resources as R
from controller.kube.errors import GoneError, KubeError, UnavailableError, from_response

REQUEST_TIMEOUT = 30.0
PATCH_TYPES = {"merge": "application/merge-patch+json", "json": "application/json-patch+json",
               "strategic": "application/strategic-merge-patch+json"}


class TokenBucket:
    """QPS with a burst, shared by every thread of the process (client-go's flowcontrol)."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = max(qps, 0.001)
        self.burst = max(1, burst)
        self.tokens = float(self.burst)
        self.at = time.monotonic()
        self.lock = threading.Lock()

    def take(self) -> None:
        """Wait until a token is free, then spend it."""
        while True:
            with self.lock:
                now = time.monotonic()
                self.tokens = min(self.burst, self.tokens + (now - self.at) * self.qps)
                self.at = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                wait = (1 - self.tokens) / self.qps
            time.sleep(wait)


class KubeClient:
    """get/list/watch/create/patch/update/delete/evict on plain dicts."""

    def __init__(self, configuration: k8s.Configuration, qps: float = 200, burst: int = 300) -> None:
        self.configuration = configuration
        self.api_client = k8s.ApiClient(configuration)
        self.pool = self.api_client.rest_client.pool_manager
        self.host = configuration.host.rstrip("/")
        self.ca_file = configuration.ssl_ca_cert or ""
        self.limiter = TokenBucket(qps, burst)
        self._versions: dict[str, str] = {}  # group -> preferred served version, resolved once
        self._lock = threading.Lock()
        if not configuration.verify_ssl:
            # the kubeconfig asked for it (insecure-skip-tls-verify): say so once, not on every request
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

    @classmethod
    def from_environment(cls, kubeconfig: str | None = None, qps: float = 200, burst: int = 300) -> KubeClient:
        """In-cluster config when running in a pod, else the kubeconfig file ($KUBECONFIG, ~/.kube/config)."""
        cfg = k8s.Configuration()
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
            k8s_config.load_incluster_config(client_configuration=cfg)
        else:
            k8s_config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG") or None,
                                        client_configuration=cfg)
        return cls(cfg, qps, burst)

    # ---- transport ---------------------------------------------------------------------------------------------
    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "karpy"}
        auths: dict[str, Any] = dict(self.configuration.auth_settings())
        for auth in auths.values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[str(auth["key"])] = str(auth["value"])
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def request(self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None,
                content_type: str = "application/json", timeout: float = REQUEST_TIMEOUT,
                stream: bool = False) -> Any:
        """One API call; the decoded JSON answer (or the open response when stream). Errors are typed."""
        self.limiter.take()
        url = self.host + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = None if body is None else json.dumps(body).encode()
        try:
            resp = self.pool.request(method, url, body=data, headers=self._headers(content_type if data else None),
                                     preload_content=False, retries=False,
                                     timeout=urllib3.Timeout(connect=min(10.0, timeout), read=timeout))
        except urllib3.exceptions.HTTPError as e:
            raise UnavailableError(0, "Unavailable", f"{method} {path}: {e}") from None
        if resp.status >= 400:
            raw = resp.read()
            resp.release_conn()
            raise from_response(resp.status, raw)
        if stream:
            return resp
        try:
            raw = resp.read()
        except urllib3.exceptions.HTTPError as e:
            raise UnavailableError(0, "Unavailable", f"{method} {path}: {e}") from None
        finally:
            resp.release_conn()
        return json.loads(raw) if raw else {}

    def server_version(self) -> str:
        """The apiserver's Kubernetes version, as major.minor."""
        v = self.request("GET", "/version")
        return f"{v.get('major', '1')}.{str(v.get('minor', '0')).rstrip('+')}"

    def resolve(self, res: R.Resource) -> R.Resource:
        """The resource at a version the server serves (policy/v1 PDBs and Evictions arrived in 1.21)."""
        if res.group != "policy":
            return res
        with self._lock:
            version = self._versions.get(res.group)
        if version is None:
            try:
                group = self.request("GET", f"/apis/{res.group}")
                served = [v["version"] for v in group.get("versions", [])]
                version = res.version if res.version in served else (served[0] if served else res.version)
            except KubeError:
                version = res.version
            with self._lock:
                self._versions[res.group] = version
        return R.Resource(res.group, version, res.plural, res.kind, res.namespaced)

    # ---- verbs -------------------------------------------------------------------------------------------------
    def get(self, res: R.Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        """One object (NotFoundError when absent)."""
        res = self.resolve(res)
        return dict(self.request("GET", res.path(namespace, name)))

    def list(self, res: R.Resource, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[builtins.list[dict[str, Any]], str]:
        """Every object (paged), and the list's resourceVersion to watch from."""
        res = self.resolve(res)
        items: builtins.list[dict[str, Any]] = []
        token: str | None = None
        rv = ""
        while True:
            page = self.request("GET", res.path(namespace), {"labelSelector": label_selector,
                                                              "fieldSelector": field_selector, "limit": 500,
                                                              "continue": token}, timeout=120)
            for item in page.get("items") or []:
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", res.kind)
                items.append(item)
            meta = page.get("metadata") or {}
            rv = str(meta.get("resourceVersion", rv))
            token = meta.get("continue") or None
            if not token:
                return items, rv

    def watch(self, res: R.Resource, resource_version: str, timeout_seconds: int = 300,
              namespace: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """Events from resource_version on: (ADDED|MODIFIED|DELETED|BOOKMARK, object); a BOOKMARK carries only the
        resourceVersion to resume from. A 410 raises GoneError; the iterator ends when the server closes the watch."""
        res = self.resolve(res)
        resp = self.request("GET", res.path(namespace), {"watch": 1, "resourceVersion": resource_version,
                                                          "allowWatchBookmarks": "true",
                                                          "timeoutSeconds": timeout_seconds},
                            timeout=timeout_seconds + 30, stream=True)
        try:
            buf = b""
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        code = int(obj.get("code", 500))
                        if code == 410:
                            raise GoneError(410, str(obj.get("reason", "Expired")), str(obj.get("message", "")))
                        raise from_response(code, json.dumps(obj))
                    obj.setdefault("apiVersion", res.api_version)
                    obj.setdefault("kind", res.kind)
                    yield str(kind), obj
        except urllib3.exceptions.HTTPError as e:
            raise UnavailableError(0, "Unavailable", f"watch {res.plural}: {e}") from None
        finally:
            resp.release_conn()

    def create(self, res: R.Resource, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Create; ConflictError (reason AlreadyExists) when the name is taken."""
        res = self.resolve(res)
        ns = namespace or (body.get("metadata") or {}).get("namespace")
        return dict(self.request("POST", res.path(ns), body=body))

    def patch(self, res: R.Resource, name: str, body: dict[str, Any] | builtins.list[Any], namespace: str | None = None,
              subresource: str | None = None, patch_type: str = "merge") -> dict[str, Any]:
        """Patch (JSON merge patch by default; "json" and "strategic" too)."""
        res = self.resolve(res)
        return dict(self.request("PATCH", res.path(namespace, name, subresource), body=body,
                                 content_type=PATCH_TYPES[patch_type]))

    def update(self, res: R.Resource, body: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        """Replace (PUT) with the body's resourceVersion: ConflictError when stale."""
        res = self.resolve(res)
        meta = body.get("metadata") or {}
        return dict(self.request("PUT", res.path(meta.get("namespace"), meta["name"], subresource), body=body))

    def delete(self, res: R.Resource, name: str, namespace: str | None = None,
               grace_period_seconds: int | None = None, uid: str | None = None) -> None:
        """Delete (NotFoundError when already gone); uid makes it apply to that object only."""
        res = self.resolve(res)
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if uid:
            body["preconditions"] = {"uid": uid}
        self.request("DELETE", res.path(namespace, name), body=body)

    def evict(self, namespace: str, name: str, grace_period_seconds: int | None = None, uid: str | None = None) -> None:
        """The Eviction API: TooManyRequestsError while a PodDisruptionBudget does not allow it; uid makes it apply to
        that pod only (ConflictError when the name now belongs to another), as Karpenter's eviction queue sends it."""
        policy = self.resolve(R.PDBS)
        body: dict[str, Any] = {"apiVersion": f"policy/{policy.version}", "kind": "Eviction",
                                "metadata": {"name": name, "namespace": namespace}}
        options: dict[str, Any] = {}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if uid:
            options["preconditions"] = {"uid": uid}
        if options:
            body["deleteOptions"] = options
        self.request("POST", R.PODS.path(namespace, name, "eviction"), body=body)
