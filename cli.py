"""karpy: the command line. Thin on purpose: each command parses its flags and delegates to the controller, infra or
stacks packages. Heavy imports (numpy, boto3, cdktn) happen inside the commands that need them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import click

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


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


def _load(files: tuple[str, ...]) -> list[Any]:
    from controller.api.documents import DocumentError, load_documents

    try:
        return load_documents(expand_paths(files))
    except DocumentError as e:
        _fail(str(e))


files_option = click.option("-f", "--filename", "files", multiple=True, required=True, metavar="FILE",
                            help="Manifest file or directory (repeatable; '-' reads stdin).")


class _OneLineErrors(click.Group):
    """The last line of defence for bad input: an exception no command turned into a message becomes one bounded
    line on stderr and exit 1, never a traceback (KARPY_TRACEBACK=1 shows it, for bug reports)."""

    def invoke(self, ctx: click.Context) -> Any:
        import os

        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except (Exception, RecursionError, MemoryError) as e:
            if os.environ.get("KARPY_TRACEBACK"):
                raise
            text = " ".join(str(e).split())
            text = text if len(text) <= 200 else text[:200] + "…"
            _fail(f"unexpected {type(e).__name__}: {text} (KARPY_TRACEBACK=1 shows where)")


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="karpy", prog_name="karpy")
def main() -> None:
    """karpy: Karpenter for AWS in Python: simulate, validate, convert, and deploy per environment."""


@main.command()
@files_option
@click.option("--catalog", default="aws-us-east-1", show_default=True, metavar="NAME|FILE",
              help="Instance catalog: a bundled name (aws-us-east-1, benchmark) or a snapshot file.")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
def simulate(files: tuple[str, ...], catalog: str, output: str) -> None:
    """What would Karpenter launch for these pods? An offline dry run: no cluster, no AWS account."""
    from controller.simulate.render import render
    from controller.simulate.run import SimulationError, simulate_documents

    docs = _load(files)
    try:
        result = simulate_documents(docs, catalog=catalog)
    except SimulationError as e:
        _fail(str(e))
    click.echo(render(result, output), nl=False)


@main.command()
@click.argument("pod")
@files_option
@click.option("--catalog", default="aws-us-east-1", show_default=True, metavar="NAME|FILE")
def explain(pod: str, files: tuple[str, ...], catalog: str) -> None:
    """Explain where POD (namespace/name or name) would go, or exactly why it cannot be scheduled."""
    from controller.simulate.render import explain_pod
    from controller.simulate.run import SimulationError, simulate_documents

    docs = _load(files)
    try:
        result = simulate_documents(docs, catalog=catalog)
        click.echo(explain_pod(result, pod))
    except (SimulationError, KeyError) as e:
        _fail(str(e.args[0]) if e.args else str(e))


@main.command()
@files_option
def validate(files: tuple[str, ...]) -> None:
    """Validate NodePools, NodeClaims and EC2NodeClasses with Karpenter's rules; every error is printed."""
    from controller.api import validate_document
    from controller.api.shapes import shape_errors

    docs = _load(files)
    errors: list[Any] = [err for doc in docs for err in validate_document(doc)]
    errors += [err for doc in docs for err in shape_errors(doc)]
    if len(errors) == 1:
        _fail(str(errors[0]))
    for err in errors:
        click.echo(str(err), err=True)
    checked = [d for d in docs if d.kind in ("NodePool", "NodeClaim", "EC2NodeClass", "Provisioner",
                                             "AWSNodeTemplate")]
    if errors:
        _fail(f"{len(errors)} error(s) in {len(checked)} Karpenter document(s)")
    click.echo(f"{len(checked)} Karpenter document(s) valid")


@main.command()
@files_option
def convert(files: tuple[str, ...]) -> None:
    """Convert v1beta1 / v1alpha5 Karpenter manifests to v1 (YAML on stdout, what has no v1 form on stderr)."""
    import yaml

    from controller.api.convert import ConvertError, convert_and_validate

    try:
        manifests, leftovers, errors = convert_and_validate(_load(files))
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
    """Print the CustomResourceDefinitions for NodePool, NodeClaim and EC2NodeClass."""
    from controller.api.crds import render_crds

    click.echo(render_crds(), nl=False)


@main.group()
def catalog() -> None:
    """Instance-type catalogs used by simulate."""


@catalog.command("refresh")
@click.option("--region", required=True)
@click.option("--endpoint", default=None, help="EC2 endpoint URL (e.g. LocalStack); default is AWS itself.")
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False), help="Snapshot file to write.")
@click.option("--no-pricing-api", is_flag=True, help="Do not ask the AWS Pricing API (isolated networks).")
def catalog_refresh(region: str, endpoint: str | None, out: str, no_pricing_api: bool) -> None:
    """Write a catalog snapshot: DescribeInstanceTypes, the offerings per zone, and prices (the Pricing API and spot
    price history where reachable, the documented estimate model for the rest; the file says which)."""
    import datetime as dt

    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from controller.catalog.pricing import PriceTable
    from controller.catalog.snapshot import snapshot_from_ec2
    from controller.cloud.aws.pricing import PricingProvider

    ec2 = boto3.client("ec2", region_name=region, endpoint_url=endpoint)
    # the Pricing API lives in us-east-1 (and a few others) whatever region is priced
    pricing = None if no_pricing_api else boto3.client("pricing", region_name="us-east-1")
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
def catalog_show(name: str) -> None:
    """Summarise a catalog: region, zones, number of types, where its prices come from."""
    from controller.catalog.snapshot import load_catalog

    try:
        cat = load_catalog(name)
    except ValueError as e:
        _fail(str(e))
    click.echo(f"catalog: {cat.name}\nregion: {cat.region}\nzones: {', '.join(cat.zones)}\n"
               f"instance types: {len(cat.instance_types)}\nprices: {cat.price_source}\ngenerated: {cat.generated}")


@main.command()
@click.option("--env", "envs", multiple=True, help="Environment (repeatable); default: all.")
@click.option("-o", "--output", "outdir", default="cdktf.out", show_default=True, type=click.Path(file_okay=False))
def synth(envs: tuple[str, ...], outdir: str) -> None:
    """Synthesize the Terraform JSON of environments' stacks (needs the infra extra and Node.js; no Terraform)."""
    try:
        from stacks.app import synth as synth_stacks
    except ImportError as e:
        _fail(f"synth needs the infra extra (pip install 'karpy[infra]'): {e}")
    try:
        paths = synth_stacks(list(envs) or None, outdir)
    except ValueError as e:
        _fail(str(e))
    for path in paths:
        click.echo(path)


@main.command()
@click.option("--env", "env", required=True, help="Environment (a stack in stacks/).")
def diff(env: str) -> None:
    """Show what `deploy` would change in ENV (runs the real CDK Terrain CLI and Terraform)."""
    _run_cdk("diff", env)


@main.command()
@click.option("--env", "env", required=True, help="Environment (a stack in stacks/).")
def deploy(env: str) -> None:
    """Deploy ENV's stack (runs the real CDK Terrain CLI and Terraform, auto-approved)."""
    _run_cdk("deploy", env)


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
    from controller.settings import SettingsError, describe, load, value_text

    silence_libraries()  # stderr stays ours: one line per warning or error, never a library's
    try:
        settings, sources, warnings = load(os.environ, flags)
    except SettingsError as e:
        _fail(str(e), 2)
    if check_config:
        for line in warnings:
            click.echo(f"warning: {line}", err=True)
        click.echo("\n".join(describe(settings, sources)))
        return
    from controller.logs import configure

    try:
        configure(settings.log_level, settings.log_encoding, settings.log_output_paths,
                  settings.log_error_output_paths)
    except (OSError, ValueError) as e:
        _fail(f"LOG_OUTPUT_PATHS: {' '.join(str(e).split())[:200]}", 2)
    log = logging.getLogger("karpy")
    for line in warnings:
        log.warning(line)
    for name, source in sources.items():
        if source.startswith("configmap "):
            log.info("using setting from ConfigMap", extra={
                "setting": name, "value": value_text(settings, name),
                "ConfigMap": {"name": source.removeprefix("configmap "), "namespace": settings.system_namespace}})
    try:
        from controller.main import run
    except ImportError as e:
        _fail(f"the controller runtime cannot be loaded ({e}); this build of karpy has no controller.main", 1)
    sys.exit(run(settings, sources))


def _run_cdk(action: str, env: str) -> None:
    from stacks.cli_support import MissingTool, run_cdk

    try:
        code = run_cdk(action, env)
    except MissingTool as e:
        _fail(str(e), 2)
    except ValueError as e:
        _fail(str(e))
    sys.exit(code)


if __name__ == "__main__":
    main()
