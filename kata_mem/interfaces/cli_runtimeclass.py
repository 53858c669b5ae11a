"""``kata-mem runtimeclass``: the RuntimeClass (or one per size class) whose
``overhead.podFixed`` keeps the host-side guard from clamping a pod."""

from __future__ import annotations

from itertools import pairwise
from typing import Optional

import click

from kata_mem.core.model import SIZING_MODELS, SizingConfig, SizingModel
from kata_mem.core.quantity import quantity_bytes
from kata_mem.core.values import replace
from kata_mem.edges.host import machine_arch
from kata_mem.interfaces.cli_options import emit, global_options, json_option, read_config
from kata_mem.interfaces.cli_params import DnsName, FileName, Text


@click.command("runtimeclass")
@global_options
@click.option(
    "--config", "config_path", type=FileName(), metavar="FILE", help="Kata configuration."
)
@click.option(
    "--max-pod-memory",
    type=Text("a quantity"),
    metavar="QTY",
    help="The largest pod memory limits (sum of its containers') to cover; default: what "
    "default_maxmemory lets a VM grow to.",
)
@click.option(
    "--sizing",
    type=click.Choice(SIZING_MODELS),
    help="The sizing model (default: the configuration's [kata_mem] sizing).",
)
@click.option(
    "--name",
    type=DnsName(subdomain=True),
    metavar="NAME",
    help="The RuntimeClass's name (default: kata-mem's for the configuration's hypervisor: "
    "kata-mem-qemu, kata-mem-clh, kata-mem-fc, ...; never kata-deploy's own).",
)
@click.option(
    "--handler",
    type=DnsName(subdomain=False),
    metavar="HANDLER",
    help="The runtime handler the CRI runtime knows Kata by (default: kata-deploy's for the "
    "configuration's hypervisor: kata-qemu, kata-clh, kata-fc, ...).",
)
@click.option(
    "--size-classes",
    type=Text("a list of quantities"),
    metavar="QTY,QTY...",
    help="Several RuntimeClasses, NAME-QTY each, for pods with memory limits up to each QTY "
    "(instead of --max-pod-memory): a small pod then reserves only what its class needs.",
)
@click.option(
    "--cpu-policy",
    type=click.Choice(("kata", "all-vcpus", "none")),  # runtimeclass.CPU_POLICIES
    default="kata",
    show_default=True,
    help="podFixed.cpu: kata (250m, kata-deploy's), all-vcpus (every vCPU unthrottled "
    "beyond the CPU limits) or none.",
)
@json_option("Print JSON (schema kata-mem/runtimeclass/v1).")
def runtimeclass(
    config_path: Optional[str],
    max_pod_memory: Optional[str],
    sizing: Optional[SizingModel],
    name: Optional[str],
    handler: Optional[str],
    size_classes: Optional[str],
    cpu_policy: str,
    as_json: bool,
) -> None:
    """Print the RuntimeClass whose overhead.podFixed keeps the host-side guard from ever
    clamping a pod up to --max-pod-memory (its arithmetic in comments)."""
    from kata_mem.core.runtimeclass import runtime_class_overhead
    from kata_mem.interfaces.runtimeclass import (
        default_handler,
        default_name,
        runtimeclass_json,
        runtimeclass_yaml,
    )

    bounds = None if size_classes is None else _size_classes(size_classes, max_pod_memory)
    cfg, _ = read_config(config_path)
    name = name or default_name(cfg.hypervisor)
    handler = handler or default_handler(cfg.hypervisor)
    if bounds is not None:
        _runtimeclasses(cfg, bounds, sizing, name, handler, cpu_policy, as_json)
        return
    most = (
        None
        if max_pod_memory is None
        else quantity_bytes(max_pod_memory, "--max-pod-memory", 1, "1 byte")
    )
    found = runtime_class_overhead(cfg, machine_arch(), most, sizing)
    shown = (found, cfg.path, cfg.hypervisor, name, handler, cpu_policy)
    if as_json:
        emit(runtimeclass_json(*shown))
    else:
        click.echo(runtimeclass_yaml(*shown), nl=False)


def _size_classes(text: str, max_pod_memory: Optional[str]) -> list[tuple[str, int]]:
    """``--size-classes``: each bound as typed and in bytes, in increasing order.

    :raises click.UsageError: given with --max-pod-memory, a bound given twice or out of
        order, or 0.
    """
    if max_pod_memory is not None:
        raise click.UsageError("--size-classes and --max-pod-memory: give one of the two")
    parts = [p.strip() for p in text.split(",")]
    bounds = [(p, quantity_bytes(p, f"--size-classes {p!r}")) for p in parts]
    for (a, x), (b, y) in pairwise(bounds):
        if y <= x:
            raise click.UsageError(
                f"--size-classes {text!r}: {b} is not larger than {a}; expected increasing sizes"
            )
    if bounds[0][1] == 0:
        raise click.UsageError(f"--size-classes {text!r}: expected sizes above 0")
    return bounds


def _runtimeclasses(
    cfg: SizingConfig,
    bounds: list[tuple[str, int]],
    sizing: Optional[SizingModel],
    name: str,
    handler: str,
    cpu_policy: str,
    as_json: bool,
) -> None:
    """One RuntimeClass per size class, with the split's arithmetic first."""
    from kata_mem.core.runtimeclass import runtime_class_overhead
    from kata_mem.interfaces.runtimeclass import (
        class_name,
        classes_header,
        runtimeclass_json,
        runtimeclass_yaml,
    )

    arch = machine_arch()
    classes = [
        (
            class_name(name, text),
            replace(
                runtime_class_overhead(cfg, arch, size, sizing),
                max_pod_memory_from=f"--size-classes {text}",
            ),
        )
        for text, size in bounds
    ]
    header = classes_header(classes, cfg.path, cfg.hypervisor)
    if as_json:
        emit(
            {
                "schema": "kata-mem/runtimeclass-classes/v1",
                "config": cfg.path,
                "explanation": [line for line in header if line],
                "classes": [
                    runtimeclass_json(o, cfg.path, cfg.hypervisor, n, handler, cpu_policy)
                    for n, o in classes
                ],
            }
        )
        return
    click.echo("".join(f"# {line}".rstrip() + "\n" for line in header), nl=False)
    for n, o in classes:
        click.echo("---")
        click.echo(runtimeclass_yaml(o, cfg.path, cfg.hypervisor, n, handler, cpu_policy), nl=False)
