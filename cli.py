"""karpy: the command line. Thin on purpose: each command parses its flags and delegates to the controller, infra or
stacks packages. Heavy imports (numpy, boto3, cdktn) happen inside the commands that need them."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

# the controller's settings module is light (the controller command's flags are built from it at import anyway)
from controller.settings import MIN_VALUES_POLICIES, PREFERENCE_POLICIES

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
OUTPUT_FORMATS = ("table", "json", "yaml")
KARPENTER_KINDS = ("NodePool", "NodeClaim", "EC2NodeClass", "Provisioner", "AWSNodeTemplate")


def expand_paths(paths: tuple[str, ...]) -> list[str]:
    """Files named on the command line, with directories expanded to the manifests directly in them (sorted, not
    recursive, as kubectl -f does)."""
    out: list[str] = []
    for p in paths:
        path = Path(p)
        if p != "-" and path.is_dir():
            found = sorted(str(f) for f in path.iterdir() if f.suffix in MANIFEST_SUFFIXES and f.is_file())
            if not found:
                raise click.UsageError(f"{p}: no .yaml, .yml or .json files in this directory")
            out.extend(found)
        elif p != "-" and not path.exists():
            raise click.UsageError(f"{p}: no such file or directory")
        else:
            out.append(p)
    return out


def _fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def dedupe_paths(paths: list[str]) -> list[str]:
    """Each file once, in the order first named; a file named twice (or reached twice through a directory) is
    warned about, as reading it twice would double its pods."""
    seen: dict[str, str] = {}
    out: list[str] = []
    for p in paths:
        key = p if p == "-" else os.path.realpath(p)
        if key in seen:
            _warn(f"{p}: given more than once (as {seen[key]}); read once")
            continue
        seen[key] = p
        out.append(p)
    return out


def _load(files: tuple[str, ...], karpenter: str = "") -> list[Any]:
    """The documents of the -f inputs, warning about an object defined twice and, with karpenter="each", about a
    file with no Karpenter document (validate, convert) or, with karpenter="any", about an input with none at all
    (simulate, explain)."""
    from controller.api.documents import DocumentError, load_documents

    docs: list[Any] = []
    seen: dict[tuple[str, str, str], str] = {}
    index: dict[tuple[str, str, str], int] = {}
    for path in dedupe_paths(expand_paths(files)):
        try:
            found = load_documents([path])
        except DocumentError as e:
            _fail(str(e))
        where = "stdin" if path == "-" else path
        if not found:
            _warn(f"{where}: no Kubernetes documents")
        elif karpenter == "each" and not any(d.kind in KARPENTER_KINDS for d in found):
            _warn(f"{where}: no Karpenter documents ({', '.join(KARPENTER_KINDS)})")
        for d in found:
            key = (d.kind, d.namespace or "", d.name)
            named = bool((d.raw.get("metadata") or {}).get("name"))
            if named and key in seen:
                # the later definition wins, as a second `kubectl apply` of the same object would
                ns = f"{d.namespace}/" if d.namespace else ""
                _warn(f"{where}: {d.kind} {ns}{d.name} is defined again (first in {seen[key]}); the later one is used")
                docs[index[key]] = d
                continue
            if named:
                seen[key] = where
                index[key] = len(docs)
            docs.append(d)
    if karpenter == "any" and docs and not any(d.kind in KARPENTER_KINDS for d in docs):
        _warn("no Karpenter documents in the input (no NodePool: only existing nodes can take pods)")
    return docs


def check_writable(path: str) -> None:
    """Fail (one line, before any slow work) when a file cannot be written at path."""
    target = Path(path)
    if target.is_dir():
        _fail(f"cannot write {path}: it is a directory")
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        _fail(f"cannot write {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        _fail(f"cannot write {path}: permission denied")


def check_directory(path: str) -> None:
    """Fail (one line, exit 1, before any slow work) when path cannot be or become a writable directory."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        _fail(f"cannot write to {path}: it is not a directory")
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        _fail(f"cannot write to {path}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        _fail(f"cannot write to {path}: permission denied")


def _format_option(fn: Any) -> Any:
    return click.option("-o", "--output", type=click.Choice(OUTPUT_FORMATS), default="table", show_default=True,
                        help="table for people; json or yaml (with apiVersion and kind) for scripts.")(fn)


def _check_env(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """--env checked as it is parsed, before any slow import: a usage error (exit 2) with did-you-mean. Works for
    a single --env and for a repeatable one (a tuple)."""
    if value is None or value == ():
        return value
    from controller.ops.errors import did_you_mean
    from stacks.environments import InvalidEnvironment, environment_names, environments_dir

    try:
        known = environment_names()
    except InvalidEnvironment as e:
        raise click.BadParameter(str(e)) from None
    for name in value if isinstance(value, tuple) else (value,):
        if name not in known:
            where = f" (files in {environments_dir()})" if not known else ""
            raise click.BadParameter(f"unknown environment {name!r}{did_you_mean(name, known)}{where}")
    return value


def _env_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of --env: the names of the project's environment files."""
    try:
        from stacks.environments import environment_names

        return [name for name in environment_names() if name.startswith(incomplete)]
    except Exception:  # completion must never print a traceback into the user's shell
        return []


files_option = click.option("-f", "--filename", "files", multiple=True, required=True, metavar="FILE",
                            help="Manifest file or directory (repeatable; '-' reads stdin).")


class KarpyGroup(click.Group):
    """The command group: every error a command lets through is one line on stderr (exit 1), never a traceback
    (KARPY_DEBUG=1 shows it); a usage error is one line too (exit 2); library warnings and log records are
    silenced."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx else "karpy"
            click.echo(f"error: {e.format_message()} (see '{where} --help')", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            click.echo(f"error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        from controller.logs import silence_libraries
        from controller.ops.errors import OpsError

        silence_libraries()
        command = next(iter([*getattr(ctx, "_protected_args", []), *ctx.args]), None)
        if command == "controller":
            return super().invoke(ctx)  # a long-running process: its crashes keep their traceback, in its logs
        try:
            return super().invoke(ctx)
        except OpsError as e:
            _fail(str(e), e.code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:
            sys.exit(0)  # `karpy status | head`
        except OSError as e:
            if os.environ.get("KARPY_DEBUG"):
                raise
            where = f"{e.filename}: " if getattr(e, "filename", None) else ""
            _fail(f"{where}{e.strerror or e}")
        except Exception as e:
            if os.environ.get("KARPY_DEBUG"):
                raise
            _fail(f"internal error: {type(e).__name__}: {' '.join(str(e).split())[:300]} "
                  "(KARPY_DEBUG=1 shows the traceback)")


@click.group(cls=KarpyGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="karpy", prog_name="karpy")
@click.pass_context
def main(ctx: click.Context) -> None:
    """karpy: Karpenter for AWS in Python: simulate, validate, convert, deploy per environment, and operate it.

    \b
    Examples:
      karpy simulate -f examples/        what would Karpenter launch?
      karpy explain web -f examples/     where do web's pods go, or why not?
      karpy status                       NodePools, NodeClaims, pending pods
      karpy drain NODE --wait            drain a node through its NodeClaim
      karpy completion bash              shell completion script
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())
        ctx.exit(0)


@main.command()
@files_option
@click.option("--catalog", default="aws-us-east-1", show_default=True, metavar="NAME|FILE",
              help="Instance catalog: a bundled name (aws-us-east-1, benchmark) or a snapshot file.")
@click.option("--preference-policy", type=click.Choice(PREFERENCE_POLICIES), default="Respect", show_default=True,
              help="The controller's PREFERENCE_POLICY: Ignore drops preferred affinities and ScheduleAnyway "
                   "spreads up front.")
@click.option("--min-values-policy", type=click.Choice(MIN_VALUES_POLICIES), default="Strict", show_default=True,
              help="The controller's MIN_VALUES_POLICY: BestEffort launches with fewer values than minValues "
                   "where they leave pods unschedulable.")
@_format_option
def simulate(files: tuple[str, ...], catalog: str, preference_policy: str, min_values_policy: str,
             output: str) -> None:
    """What would Karpenter launch for these pods? An offline dry run: no cluster, no AWS account.

    Reads NodePools, EC2NodeClasses, workloads (Deployments, StatefulSets, Jobs, ... expanded into their pods),
    DaemonSets, and Nodes with their pods (`kubectl get nodes,pods -A -o yaml`). Unschedulable pods are grouped
    by owner, with one reason per NodePool.

    \b
    Examples:
      karpy simulate -f examples/
      kubectl get nodes,pods,ds -A -o yaml | karpy simulate -f - -f pools.yaml
      karpy simulate -f apps.yaml -f pools.yaml --catalog snap.json.gz -o json
      karpy simulate -f examples/ --min-values-policy BestEffort
    """
    result = _simulate(files, catalog, preference_policy, min_values_policy)
    from controller.simulate.render import render

    click.echo(render(result, output), nl=False)


def _simulate(files: tuple[str, ...], catalog: str, preference_policy: str = "Respect",
              min_values_policy: str = "Strict") -> Any:
    """Load and simulate (under the controller's two scheduling policies), with a progress line on a TTY when it
    takes a while."""
    from controller.ops.output import progress
    from controller.simulate.run import SimulationError, simulate_documents

    with progress("reading the input") as shown:
        docs = _load(files, karpenter="any")
        shown.update(f"simulating {len(docs)} documents")
        try:
            return simulate_documents(docs, catalog=catalog, preference_policy=preference_policy,
                                      min_values_policy=min_values_policy)
        except SimulationError as e:
            _fail(str(e))


@main.command()
@click.argument("pod")
@files_option
@click.option("--catalog", default="aws-us-east-1", show_default=True, metavar="NAME|FILE")
@_format_option
def explain(pod: str, files: tuple[str, ...], catalog: str, output: str) -> None:
    """Explain where POD would go, or exactly why it cannot be scheduled (one reason per NodePool).

    POD is namespace/name or a pod name; an owner (Deployment/web, shop/Deployment/web, or just web) to explain
    all its pods; or a name prefix. When it matches pods of several owners, the candidates are listed.

    \b
    Examples:
      karpy explain shop/checkout-0 -f examples/
      karpy explain Deployment/web -f examples/ -o json
    """
    from controller.ops.output import dump
    from controller.simulate.render import AmbiguousPod, explain, explain_text

    result = _simulate(files, catalog)
    try:
        doc = explain(result, pod)
    except AmbiguousPod as e:
        _fail(str(e.args[0]), 2)
    except KeyError as e:
        _fail(str(e.args[0]))
    click.echo(explain_text(doc) if output == "table" else dump(doc, output), nl=False)


@main.command()
@files_option
@click.option("--catalog", default="aws-us-east-1", show_default=True, metavar="NAME|FILE",
              help="Instance catalog for prices and replacements: a bundled name or a snapshot file.")
@click.option("--now", "now_text", default=None, metavar="RFC3339",
              help="The time the pass runs at (consolidateAfter, expireAfter, budget schedules) [default: now].")
@click.option("--feature-gates", default="", metavar="GATE=BOOL,...",
              help="The controller's FEATURE_GATES, e.g. SpotToSpotConsolidation=true; also karpy's "
                   "ManyToManyConsolidation.")
@click.option("--preference-policy", type=click.Choice(PREFERENCE_POLICIES), default="Respect", show_default=True,
              help="The controller's PREFERENCE_POLICY, for the consolidation simulation.")
@click.option("--min-values-policy", type=click.Choice(MIN_VALUES_POLICIES), default="Strict", show_default=True,
              help="The controller's MIN_VALUES_POLICY, for replacements.")
@click.option("--apply", "apply_files", multiple=True, metavar="FILE",
              help="Proposed NodePools/EC2NodeClasses (repeatable): preview which NodeClaims would drift and in "
                   "which pass the budgets let each go.")
@_format_option
def disruption(files: tuple[str, ...], catalog: str, now_text: str | None, feature_gates: str,
               preference_policy: str, min_values_policy: str, apply_files: tuple[str, ...], output: str) -> None:
    """What would Karpenter disrupt next? The controller's next disruption pass over a cluster snapshot, offline.

    Reads what simulate reads plus NodeClaims and PodDisruptionBudgets. Prints the commands of the first method
    that finds any (Emptiness, StaticDrift, Drift, MultiNodeConsolidation, SingleNodeConsolidation), the
    NodeClaims past expireAfter, and why the other nodes are not candidates.

    \b
    Examples:
      karpy disruption -f examples/disruption/
      kubectl get no,po,nodeclaim,nodepool,ec2nodeclass,pdb -A -o yaml >snap.yaml
      karpy disruption -f snap.yaml --now 2026-01-05T03:00:00Z -o json
      karpy disruption -f snap.yaml --apply pools.yaml     (drift preview)
    """
    from controller.disruption import types as T
    from controller.disruption.documents import DisruptionInputError, parse_now
    from controller.disruption.preview import PassError, plan
    from controller.disruption.render import render as render_plan
    from controller.ops.output import progress
    from controller.settings import FEATURE_GATE_DEFAULTS, parse_feature_gates

    try:
        now = parse_now(now_text) if now_text is not None else None
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--now") from None
    try:
        gates = parse_feature_gates(feature_gates, {**FEATURE_GATE_DEFAULTS, T.GATE_N_TO_M: False,
                                                    T.GATE_REBALANCE_DRIFT: False})
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--feature-gates") from None
    options = T.Options(spot_to_spot=gates.get("SpotToSpotConsolidation", False),
                        many_to_many=gates.get(T.GATE_N_TO_M, False), preference_policy=preference_policy,
                        min_values_policy=min_values_policy)
    with progress("reading the input") as shown:
        docs = _load(files, karpenter="any")
        proposed = _load(apply_files) if apply_files else None
        shown.update(f"computing the disruption pass over {len(docs)} documents")
        try:
            result = plan(docs, catalog=catalog, now=now, options=options, proposed=proposed, progress=shown.update)
        except (DisruptionInputError, PassError) as e:
            _fail(str(e))
    click.echo(render_plan(result, output), nl=False)


@main.command()
@files_option
@_format_option
def validate(files: tuple[str, ...], output: str) -> None:
    """Validate NodePools, NodeClaims and EC2NodeClasses with Karpenter's rules; every error is printed.

    Exit 1 when any document is invalid. With -o json|yaml the result (documents checked, errors by file, kind,
    name and field) goes to stdout.

    \b
    Examples:
      karpy validate -f nodepools.yaml -f ec2nodeclasses.yaml
      karpy validate -f manifests/ -o json
    """
    from controller.api import validate_document
    from controller.api.shapes import shape_errors
    from controller.ops.output import dump, machine

    docs = _load(files, karpenter="each")
    checked = [d for d in docs if d.kind in KARPENTER_KINDS]
    errors: list[tuple[Any, Any]] = [(doc, err) for doc in docs for err in validate_document(doc)]
    # the fields of the other kinds (pods, workloads, nodes...) that a simulation reads, typed and bounded
    shapes = [(doc, line) for doc in docs for line in shape_errors(doc)]
    if output != "table":
        click.echo(dump(machine("ValidationResult", {
            "valid": not (errors or shapes), "documents": len(checked),
            "errors": [{"file": doc.source, "kind": doc.kind, "name": doc.name, "field": err.path or None,
                        "message": err.message} for doc, err in errors]
            + [{"file": doc.source, "kind": doc.kind, "name": doc.name, "field": None, "message": line}
               for doc, line in shapes]}), output), nl=False)
        if errors or shapes:
            sys.exit(1)
        return
    lines = [str(err) for _, err in errors] + [line for _, line in shapes]
    if len(lines) == 1:
        _fail(lines[0])
    for line in lines:
        click.echo(line, err=True)
    if lines:
        _fail(f"{len(lines)} error(s) in {len(docs)} document(s)")
    click.echo(f"{len(checked)} Karpenter document(s) valid")


@main.command()
@files_option
def convert(files: tuple[str, ...]) -> None:
    """Convert v1beta1 / v1alpha5 Karpenter manifests to v1 (YAML on stdout, what has no v1 form on stderr).

    \b
    Examples:
      karpy convert -f examples/legacy/ > v1.yaml
      kubectl get provisioners,awsnodetemplates -o yaml | karpy convert -f -
    """
    import yaml

    from controller.api.convert import ConvertError, convert_and_validate

    try:
        manifests, leftovers, errors = convert_and_validate(_load(files, karpenter="each"))
    except ConvertError as e:
        _fail(str(e))
    for line in leftovers:
        click.echo(f"not converted: {line}", err=True)
    if len(errors) == 1:
        _fail(f"{errors[0]}; nothing printed")
    if errors:
        # no output that `karpy validate` would refuse: the errors say what to fix in the input
        for line in errors[:20]:
            click.echo(line, err=True)
        _fail(f"the v1 output would not validate ({len(errors)} error(s)); nothing printed")
    click.echo(yaml.safe_dump_all(manifests, sort_keys=False), nl=False)


@main.command()
def crds() -> None:
    """Print the CustomResourceDefinitions for NodePool, NodeClaim and EC2NodeClass.

    \b
    Example:
      karpy crds | kubectl apply -f -
    """
    from controller.api.crds import render_crds

    click.echo(render_crds(), nl=False)


@main.group()
def catalog() -> None:
    """Instance-type catalogs used by simulate.

    \b
    Examples:
      karpy catalog show
      karpy catalog refresh --region eu-west-1 -o eu-west-1.json.gz
    """


@catalog.command("refresh")
@click.option("--region", required=True)
@click.option("--endpoint", default=None, help="EC2 endpoint URL (e.g. LocalStack); default is AWS itself.")
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False), help="Snapshot file to write.")
@click.option("--no-pricing-api", is_flag=True, help="Do not ask the AWS Pricing API (isolated networks).")
def catalog_refresh(region: str, endpoint: str | None, out: str, no_pricing_api: bool) -> None:
    """Write a catalog snapshot: DescribeInstanceTypes, the offerings per zone, and prices (the Pricing API and spot
    price history where reachable, the documented estimate model for the rest; the file says which).

    \b
    Examples:
      karpy catalog refresh --region eu-west-1 -o eu-west-1.json.gz
      karpy simulate -f examples/ --catalog eu-west-1.json.gz
    """
    import datetime as dt

    from botocore.exceptions import BotoCoreError, ClientError

    from controller.catalog.pricing import PriceTable
    from controller.catalog.snapshot import snapshot_from_ec2
    from controller.cloud.aws.clients import PRICING_CONFIG, make_client
    from controller.cloud.aws.pricing import PricingProvider

    check_writable(out)
    # the controller's retry policy (adaptive, throttling and transient errors retried), not boto3's default
    ec2 = make_client("ec2", region, endpoint)
    # the Pricing API lives in us-east-1 (and a few others) whatever region is priced; --endpoint is EC2's only
    pricing = None if no_pricing_api else make_client("pricing", "us-east-1", config=PRICING_CONFIG)
    live = PricingProvider(pricing, ec2, region, PriceTable())

    def price(instance_type: str, zone: str | None) -> float | None:
        return live.on_demand_price(instance_type) if zone is None else live.spot_price(instance_type, zone)

    try:
        count = snapshot_from_ec2(ec2, region, out, dt.date.today().isoformat(), live=price,
                                  live_source="live: Pricing API on-demand and spot price history")
    except (BotoCoreError, ClientError) as e:
        _fail(f"EC2 {region}: {e}")
    click.echo(f"wrote {count} instance types to {out} (prices: {live.source}; see `karpy catalog show`)")


@catalog.command("show")
@click.option("--catalog", "name", default="aws-us-east-1", show_default=True, metavar="NAME|FILE")
@_format_option
def catalog_show(name: str, output: str) -> None:
    """Summarise a catalog: region, zones, number of types, where its prices come from.

    \b
    Examples:
      karpy catalog show
      karpy catalog show --catalog snapshot.json.gz -o json
    """
    from controller.catalog.snapshot import load_catalog
    from controller.ops.output import dump, machine, wrap

    try:
        cat = load_catalog(name)
    except ValueError as e:
        _fail(str(e))
    if output != "table":
        click.echo(dump(machine("Catalog", {
            "name": cat.name, "region": cat.region, "zones": cat.zones, "instanceTypes": len(cat.instance_types),
            "prices": cat.price_source, "generated": cat.generated}), output), nl=False)
        return
    lines = [f"catalog: {cat.name}", f"region: {cat.region}", *wrap(f"zones: {', '.join(cat.zones)}"),
             f"instance types: {len(cat.instance_types)}", *wrap(f"prices: {cat.price_source}"),
             f"generated: {cat.generated}"]
    click.echo("\n".join(lines))


@main.command()
@click.option("--env", "name", default="dev", show_default=True, help="Name of the new environment (its file name).")
@click.option("--account-id", required=True, help="The AWS account of the cluster (12 digits).")
@click.option("--region", required=True, help="The cluster's AWS region.")
@click.option("--cluster-name", default=None, help="The EKS cluster's name [default: the environment's name].")
@click.option("-d", "--dir", "directory", default=".", show_default=True, type=click.Path(file_okay=False),
              help="The project directory (where cdktf.json is or goes).")
def init(name: str, account_id: str, region: str, cluster_name: str | None, directory: str) -> None:
    """Start a project: cdktf.json (if missing) and environments/ENV.yaml with every field explained.

    \b
    Examples:
      karpy init --account-id 111122223333 --region us-east-1
      karpy init --env prod --account-id 111122223333 \\
          --region eu-west-1 --cluster-name prod-eu -d infra/
    """
    from stacks.environments import InvalidEnvironment, init_project

    try:
        written = init_project(Path(directory), name, account_id, region, cluster_name or name)
    except InvalidEnvironment as e:
        _fail(str(e))
    for path in written:
        click.echo(f"wrote {path}")
    click.echo(f"next: fill in {written[-1]} (IRSA or Pod Identity, subnets, pools),\n"
               f"then `karpy render --env {name}`, or `karpy diff --env {name}` and `karpy deploy --env {name}`")


def _env_option(required: bool = True, multiple: bool = False, help_text: str = "") -> Any:
    """--env of the project commands (render, synth, diff, deploy): completed from the environment files and
    checked before any slow import, as the ops commands' --env is."""
    return click.option("--env", "envs" if multiple else "env", required=required, multiple=multiple, metavar="ENV",
                        shell_complete=_env_names, callback=_check_env,
                        help=help_text or "Environment (a file in the project's environments/).")


@main.command()
@_env_option()
@click.option("-o", "--output-dir", "outdir", default=None, type=click.Path(file_okay=False),
              help="Write one file per object and a kustomization.yaml here instead of YAML on stdout.")
def render(env: str, outdir: str | None) -> None:
    """The objects the stacks deploy into ENV's cluster, as plain YAML (for kubectl, kustomize, GitOps): CRDs,
    Namespace, ServiceAccount, RBAC, Deployment, PDB, then the NodePools and EC2NodeClasses. Apply them in this order
    (the CRDs must be established before the custom resources). Needs no AWS or cluster access; the IAM roles and the
    queue they name come from `karpy deploy` (or your own Terraform) under the names shown.

    \b
    Examples:
      karpy render --env dev | kubectl apply --server-side -f -
      karpy render --env prod -o overlays/prod/base
    """
    from infra.manifests import InvalidKarpenterResources
    from infra.names import InvalidName
    from stacks.environments import InvalidEnvironment, load_environments
    from stacks.render import render_objects, to_yaml, write_directory

    if outdir is not None:
        check_directory(outdir)
    try:
        objects = render_objects(load_environments(None, [env])[0])
    except (InvalidEnvironment, InvalidName, InvalidKarpenterResources) as e:
        _fail(str(e))
    if outdir is None:
        click.echo(to_yaml(objects), nl=False)
        return
    try:
        written = write_directory(objects, Path(outdir))
    except OSError as e:
        _fail(f"{e.filename or outdir}: {e.strerror or e}")
    click.echo(f"wrote {len(written)} files to {outdir}")


@main.command()
@_env_option(required=False, multiple=True, help_text="Environment (repeatable); default: all.")
@click.option("-o", "--output", "outdir", default="cdktf.out", show_default=True, type=click.Path(file_okay=False),
              help="Where to write the stacks (DIR/stacks/STACK/cdk.tf.json).")
def synth(envs: tuple[str, ...], outdir: str) -> None:
    """Synthesize the Terraform JSON of environments' stacks, two per environment in deploy order: ENV (AWS
    resources and the controller) and ENV-pools (NodePools, EC2NodeClasses). Needs the infra extra and Node.js.

    \b
    Examples:
      karpy synth
      karpy synth --env dev --env prod -o /tmp/stacks
    """
    from stacks.cli_support import MissingTool, check_infra_extra, node_version, quiet_environ
    from stacks.environments import InvalidEnvironment, load_environments

    try:  # what is missing first: a missing extra or Node.js is a usage-level problem, said before any slow work
        check_infra_extra("synth")
        node = node_version()
    except MissingTool as e:
        _fail(str(e), 2)
    quiet_environ(os.environ, node[0])  # jsii inherits this process's environment: no Node.js banner
    try:  # the environment files and the output directory next: reported before jsii starts
        load_environments(None, list(envs) or None)
    except InvalidEnvironment as e:
        _fail(str(e))
    check_directory(outdir)
    from controller.ops.output import progress

    with progress(f"synthesizing {', '.join(envs) if envs else 'every environment'}"):
        try:
            from stacks.app import synth as synth_stacks
        except ImportError as e:
            _fail(f"synth needs the infra extra (pip install 'karpy[infra]'): {e}", 2)
        try:
            paths = synth_stacks(list(envs) or None, outdir)
        except ValueError as e:
            _fail(str(e))
    for path in paths:
        click.echo(path)


@main.command("synth-app", hidden=True)
def synth_app() -> None:
    """The app command of cdktf.json: synthesize every environment where cdktf asks."""
    from stacks.cli_support import quiet_jsii

    quiet_jsii()  # also when the user runs the CDK Terrain CLI directly
    from stacks.app import main as app_main

    try:
        app_main()
    except ValueError as e:
        _fail(str(e))


@main.command()
@_env_option()
def diff(env: str) -> None:
    """Show what `deploy` would change in ENV's two stacks (runs the real CDK Terrain CLI and Terraform). Before the
    first deploy, ENV-pools cannot be planned yet: its CRDs and ENV's state do not exist.

    Needs the infra extra, Node.js, the CDK Terrain CLI (cdktn-cli) of the cdktn package's version, and terraform;
    what is missing is named (exit 2) before anything runs.

    \b
    Examples:
      karpy diff --env staging
    """
    _run_cdk("diff", env, auto_approve=False)


def _stdin_is_tty() -> bool:
    """Whether someone can answer a prompt (a function, so tests can say yes)."""
    return sys.stdin.isatty()


@main.command()
@_env_option()
@click.option("-y", "--yes", is_flag=True, help="Deploy without asking (needed when stdin is not a terminal).")
def deploy(env: str, yes: bool) -> None:
    """Deploy ENV: its stack ENV, then ENV-pools once the CRDs are in (the real CDK Terrain CLI and Terraform).

    Asks for confirmation on a terminal, as `terraform apply` does; --yes skips the question (CI). Needs what
    `karpy diff` needs; what is missing is named (exit 2) before anything runs.

    \b
    Examples:
      karpy diff --env prod && karpy deploy --env prod
      karpy deploy --env dev --yes
    """
    from stacks.cli_support import MissingTool, check_toolchain, stacks_of
    from stacks.environments import InvalidEnvironment, load_environments

    try:
        tools = check_toolchain("deploy")
    except MissingTool as e:
        _fail(str(e), 2)
    if not yes:
        if not _stdin_is_tty():
            _fail(f"stdin is not a terminal, so deploy cannot ask for confirmation: pass --yes to deploy {env}", 2)
        try:
            cfg = load_environments(None, [env])[0]
        except InvalidEnvironment as e:
            _fail(str(e))
        click.echo(f"Deploying stacks {', '.join(stacks_of(env))} to account {cfg.account_id}, region {cfg.region}, "
                   f"cluster {cfg.cluster_name}.\n`karpy diff --env {env}` shows the changes first.")
        if not click.confirm("Deploy?", default=False):
            _fail("not deployed", 1)
    _run_cdk("deploy", env, auto_approve=True, toolchain=tools)


# ---- operating a cluster ----------------------------------------------------------------------------------------

def _cluster_options(fn: Any) -> Any:
    """--kubeconfig, --context and --env: which cluster an ops command talks to."""
    fn = click.option("--env", "env", default=None, metavar="ENV", shell_complete=_env_names, callback=_check_env,
                      help="Environment: use the kubeconfig context whose server is its cluster endpoint.")(fn)
    fn = click.option("--context", default=None, metavar="NAME", help="kubeconfig context (default: current).")(fn)
    return click.option("--kubeconfig", default=None, metavar="PATH", type=click.Path(dir_okay=False),
                        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config; in a pod without "
                             "either, the service account).")(fn)


def _kube(kubeconfig: str | None, context: str | None, env: str | None) -> Any:
    from controller.ops.connect import kube_client

    if env and context:
        raise click.UsageError("--env picks the context itself; give --env or --context, not both")
    return kube_client(kubeconfig, context, env)


@main.command()
@_cluster_options
@_format_option
def status(kubeconfig: str | None, context: str | None, env: str | None, output: str) -> None:
    """NodePools (usage against limits, Ready), NodeClaims (state, age, type, zone, capacity type, $/h, node) and
    pending pods with the last FailedScheduling message, grouped by owner.

    Prices are the bundled catalog's (us-east-1 estimates; `-` for zones it does not price).

    \b
    Examples:
      karpy status
      karpy status --env prod -o json
      KUBECONFIG=~/.kube/staging karpy status
    """
    from controller.catalog.snapshot import load_prices
    from controller.ops.output import progress
    from controller.ops.status import collect, render

    client = _kube(kubeconfig, context, env)
    with progress("reading the cluster"):
        doc = collect(client, load_prices())
    click.echo(render(doc, output), nl=False)


@main.command()
@click.argument("name", metavar="NODECLAIM|NODE")
@click.option("--wait", is_flag=True, help="Show the drain's progress until the NodeClaim is gone.")
@click.option("--timeout", type=click.FloatRange(min=0), default=0, show_default=True, metavar="SECONDS",
              help="With --wait: give up (exit 1) after this long; 0 waits for ever.")
@_cluster_options
def drain(name: str, wait: bool, timeout: float, kubeconfig: str | None, context: str | None,
          env: str | None) -> None:
    """Drain a node the way Karpenter does: delete its NodeClaim, so the controller taints the node, evicts its pods
    (honouring PodDisruptionBudgets), terminates the instance and lets the node go.

    A Node's name is resolved to its NodeClaim (owner reference, providerID). Needs the karpy controller running.

    \b
    Examples:
      karpy drain default-x7k2p
      karpy drain ip-10-0-1-23.ec2.internal --wait --timeout 900
    """
    from controller.ops.nodes import drain as drain_claim
    from controller.ops.nodes import wait_gone

    client = _kube(kubeconfig, context, env)
    claim, line = drain_claim(client, name)
    click.echo(line)
    if wait:
        wait_gone(client, claim, lambda state: click.echo(state.line()), timeout=timeout)


@main.command()
@click.argument("node", metavar="NODE")
@_cluster_options
def cordon(node: str, kubeconfig: str | None, context: str | None, env: str | None) -> None:
    """Mark NODE (or a NodeClaim's node) unschedulable; its pods stay.

    \b
    Example:
      karpy cordon ip-10-0-1-23.ec2.internal
    """
    from controller.ops.nodes import set_unschedulable

    click.echo(set_unschedulable(_kube(kubeconfig, context, env), node, True))


@main.command()
@click.argument("node", metavar="NODE")
@_cluster_options
def uncordon(node: str, kubeconfig: str | None, context: str | None, env: str | None) -> None:
    """Mark NODE (or a NodeClaim's node) schedulable again.

    \b
    Example:
      karpy uncordon ip-10-0-1-23.ec2.internal
    """
    from controller.ops.nodes import set_unschedulable

    click.echo(set_unschedulable(_kube(kubeconfig, context, env), node, False))


@main.command()
@click.option("--queue-url", default=None, metavar="URL", help="The interruption queue (INTERRUPTION_QUEUE's URL).")
@click.option("--env", "env", default=None, metavar="ENV", shell_complete=_env_names, callback=_check_env,
              help="Environment: its region and its queue (named after its cluster).")
@click.option("--instance", "instance_id", default=None, metavar="i-…", help="The EC2 instance to interrupt.")
@click.option("--nodeclaim", default=None, metavar="NAME", help="The NodeClaim whose instance to interrupt, read "
              "from the cluster (--kubeconfig, --context; with --env, its context).")
@click.option("--region", default=None, metavar="REGION",
              help="AWS region (default: the environment's, the queue URL's, or AWS_REGION).")
@click.option("--endpoint-url", default=None, metavar="URL", help="AWS endpoint (e.g. LocalStack); AWS_ENDPOINT_URL "
              "works too.")
@click.option("--cluster-name", default=None, metavar="NAME",
              help="Also require the instance to carry this cluster's ownership tag (default: the environment's "
                   "cluster).")
@click.option("--kubeconfig", default=None, metavar="PATH", type=click.Path(dir_okay=False),
              help="kubeconfig for --nodeclaim (default: $KUBECONFIG, else ~/.kube/config).")
@click.option("--context", default=None, metavar="NAME", help="kubeconfig context for --nodeclaim.")
def interrupt(queue_url: str | None, env: str | None, instance_id: str | None, nodeclaim: str | None,
              region: str | None, endpoint_url: str | None, cluster_name: str | None, kubeconfig: str | None,
              context: str | None) -> None:
    """Rehearse a spot interruption: send the interruption queue EC2's "Spot Instance Interruption Warning" for one
    of karpy's instances. The controller then cordons and drains its node and launches a replacement.

    The instance must exist (DescribeInstances) and carry karpy's tags; nothing else is accepted.

    \b
    Examples:
      karpy interrupt --env staging --instance i-0123456789abcdef0
      karpy interrupt --queue-url "$QUEUE_URL" --nodeclaim default-x7k2p
    """
    from controller.ops.interrupt import rehearse

    if (queue_url is None) == (env is None):
        raise click.UsageError("give the queue: --queue-url URL or --env ENV (one of them)")
    if (instance_id is None) == (nodeclaim is None):
        raise click.UsageError("give what to interrupt: --instance i-… or --nodeclaim NAME (one of them)")
    sent = rehearse(queue_url=queue_url, env=env, instance_id=instance_id, nodeclaim=nodeclaim, region=region,
                    endpoint_url=endpoint_url, cluster_name=cluster_name, kubeconfig=kubeconfig, context=context)
    click.echo(f"sent a spot interruption warning for {sent.instance_id} to {sent.queue_url} "
               f"(message {sent.message_id}); the controller drains its node within seconds")


# ---- about karpy ---------------------------------------------------------------------------------------------

@main.command()
@click.option("-o", "--output", type=click.Choice(OUTPUT_FORMATS), default="table", show_default=True)
def version(output: str) -> None:
    """karpy's version, the source revision it was built from, and Python's.

    \b
    Examples:
      karpy version
      karpy version -o json | jq -r .version
    """
    from controller.ops.about import version_info, version_line
    from controller.ops.output import dump, machine

    info = version_info()
    click.echo(version_line(info) + "\n" if output == "table" else dump(machine("Version", info), output), nl=False)


@main.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL (commands, options, files, environment names).

    \b
    Examples:
      karpy completion bash > /etc/bash_completion.d/karpy
      echo 'eval "$(karpy completion zsh)"' >> ~/.zshrc
      karpy completion fish > ~/.config/fish/completions/karpy.fish
    """
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    assert cls is not None  # the three choices are click's built-in shells
    click.echo(cls(main, {}, "karpy", "_KARPY_COMPLETE").source())


def _setting_options(fn: Any) -> Any:
    """A flag per controller setting, named after its environment variable (CLUSTER_NAME -> --cluster-name)."""
    from controller.settings import SPECS, format_feature_gates

    for spec in reversed(SPECS):
        if spec.default in (None, "", ()):
            shown = ""
        elif spec.name == "FEATURE_GATES":
            shown = f" [default: {format_feature_gates(spec.default)}]"
        else:
            shown = f" [default: {spec.show(spec.default)}]"
        text = f"{spec.help} Env: {spec.name}.{shown}"
        if spec.bool_flag:
            fn = click.option(spec.option, spec.name, is_flag=True, flag_value="true", default=None, help=text)(fn)
        else:
            fn = click.option(spec.option, spec.name, default=None, metavar="VALUE", help=text)(fn)
    return fn


@main.command()
@click.option("--check-config", is_flag=True, help="Print each resolved setting as NAME=value (source) and exit; "
              "calls no AWS API.")
@_setting_options
def controller(check_config: bool, **flags: str | None) -> None:
    """Run the autoscaler: Karpenter's controllers against the cluster of the in-cluster config or KUBECONFIG.

    Settings come from flags, then Karpenter's environment variables, then the legacy ConfigMaps
    karpenter-global-settings and config-logging in SYSTEM_NAMESPACE, then defaults. A missing or bad setting exits 2.

    \b
    Examples:
      CLUSTER_NAME=prod karpy controller
      karpy controller --cluster-name prod --check-config
    """
    import logging
    import os

    from controller.logs import silence_libraries
    from controller.settings import SettingsError, describe, load, log_sources, unsupported_feature_gates

    silence_libraries()  # stderr stays ours: one line per warning or error, never a library's
    try:
        settings, sources, warnings = load(os.environ, flags)
    except SettingsError as e:
        _fail(str(e), 2)
    refused = unsupported_feature_gates(settings.feature_gates)
    if check_config:
        for line in [*warnings, *refused]:
            click.echo(f"warning: {line}", err=True)
        click.echo("\n".join(describe(settings, sources)))
        return
    if refused:
        _fail(refused[0], 2)
    from controller.logs import configure

    try:
        configure(settings.log_level, settings.log_encoding, settings.log_output_paths,
                  settings.log_error_output_paths)
    except (OSError, ValueError) as e:
        _fail(f"LOG_OUTPUT_PATHS: {' '.join(str(e).split())[:200]}", 2)
    log = logging.getLogger("karpy")
    for line in warnings:
        log.warning(line)
    log_sources(log, settings, sources)  # which source won, where a legacy ConfigMap had a say
    try:
        from controller.main import run
    except ImportError as e:
        _fail(f"the controller runtime cannot be loaded ({e}); this build of karpy has no controller.main", 1)
    sys.exit(run(settings, sources))


def _run_cdk(action: str, env: str, auto_approve: bool, toolchain: Any = None) -> None:
    """Run the CDK Terrain CLI for env (see stacks.cli_support.run_cdk); a missing tool exits 2 before it starts."""
    from stacks.cli_support import MissingTool, run_cdk

    try:
        code = run_cdk(action, env, auto_approve=auto_approve, toolchain=toolchain)
    except MissingTool as e:
        _fail(str(e), 2)
    except ValueError as e:
        _fail(str(e))
    sys.exit(code)


if __name__ == "__main__":
    main()
