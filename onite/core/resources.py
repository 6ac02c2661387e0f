"""Resource requests: sizes in Slurm's words (``parse_size``, the one parser), what a job asks for (nothing:
no memory and no CPU), what a host has (what its admin set, else the machine's minus a reserve).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from onite.core.errors import ConfigError, bad_value
from onite.core.record import Record

MAX_MEM = 1 << 30  # MiB: a PiB; beyond it a request is a typo
MAX_CPUS = 4096
MIB = 1 << 20
_UNITS = {"K": 1 << 10, "": MIB, "M": MIB, "G": 1 << 30, "T": 1 << 40}  # bytes per unit: a bare number is MiB
_SIZE = re.compile(r"([0-9]{1,16})([KMGT]?)", re.IGNORECASE)


def parse_size(text: str, *, what: str) -> int:
    """A size in Slurm's words (``4G``, ``512M``, ``100K``, ``2048`` = 2048M), in bytes. Raises InvalidInput."""
    match = _SIZE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise bad_value(what, text, "a whole number and a unit, such as 4G or 512M")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def parse_mem(text: str, *, what: str = "--mem") -> int:
    """A memory size in MiB, rounded up as Slurm does. Raises InvalidInput: as parse_size, or not 1 to MAX_MEM."""
    mib = -(-parse_size(text, what=what) // MIB)
    if not 1 <= mib <= MAX_MEM:
        raise bad_value(what, text.strip(), "a size from 1M to 1024T")
    return mib


def format_mem(mib: int) -> str:
    """A size in MiB as ``parse_mem`` reads it back exactly: ``4G``, ``1536M``, ``2T``."""
    for unit, size in (("T", 1024 * 1024), ("G", 1024)):
        if mib % size == 0:
            return f"{mib // size}{unit}"
    return f"{mib}M"


def human_bytes(count: int) -> str:
    """An amount of bytes for people: ``4.0G``, ``312.5M``, ``800K``."""
    for unit, size in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20)):
        if count >= size:
            return f"{count / size:.1f}{unit}"
    return f"{-(-count // 1024)}K"


def parse_cpus(value: object, *, what: str = "--cpus") -> int:
    """A CPU count from 1 to MAX_CPUS (leading zeros and blanks allowed). Raises InvalidInput."""
    text = str(value).strip()
    digits = text.lstrip("0")
    # never handed to int() when it is too long to be a count
    if not text.isascii() or not text.isdigit() or len(digits) > len(str(MAX_CPUS)) or \
            not 1 <= int(digits or "0") <= MAX_CPUS:
        raise bad_value(what, text, f"a number of CPUs from 1 to {MAX_CPUS}")
    return int(digits)


def cpus_text(count: int) -> str:
    return f"{count} CPU{'' if count == 1 else 's'}"


def capacity_text(capacity: Need) -> str:
    """A capacity for the log and ``onite status``: ``23G memory, 2 CPUs``."""
    return f"{format_mem(capacity.mem)} memory, {cpus_text(capacity.cpus)}"


class Need(Record):
    """An amount of each resource: memory (MiB), CPUs, slots. A request, what is free, a capacity."""

    mem: int = 0
    cpus: int = 0
    slots: int = 1

    def __add__(self, other: Need) -> Need:
        return Need(self.mem + other.mem, self.cpus + other.cpus, self.slots + other.slots)

    def __sub__(self, other: Need) -> Need:
        return Need(self.mem - other.mem, self.cpus - other.cpus, self.slots - other.slots)

    def fits(self, room: Need) -> bool:
        return self.mem <= room.mem and self.cpus <= room.cpus and self.slots <= room.slots

    def shortage(self, room: Need) -> str:
        """What this request lacks in ``room``, in words: ``4G memory (2G free)``, ``2 CPUs (1 free)``."""
        parts = []
        if self.mem > room.mem:
            parts.append(f"{format_mem(self.mem)} memory ({format_mem(room.mem) if room.mem > 0 else 'none'} free)")
        if self.cpus > room.cpus:
            parts.append(f"{cpus_text(self.cpus)} ({max(room.cpus, 0)} free)")
        if self.slots > room.slots:
            parts.append("a free slot")
        return " and ".join(parts)


def request_of(mem: int | None, cpus: int | None) -> Need:
    """What a job asks for, as its file says (the spool's defaults were applied at submit)."""
    return Need(mem=mem or 0, cpus=cpus or 0)


def host_capacity(config, host: str, machine: tuple[int | None, int | None], *, source: str,
                  slots: int = 1) -> Need:
    """``host``'s capacity: its ``[hosts.NAME]`` mem and cpus, else ``machine``'s (None: unknown, unbounded) less
    the reserve. Raises ConfigError naming ``source``: the reserve leaves nothing of the machine for jobs."""
    override = config.hosts.get(host)
    set_mem, set_cpus = (override.mem, override.cpus) if override else (None, None)
    machine_mem, machine_cpus = machine
    mem = set_mem if set_mem is not None else (max(machine_mem - config.reserve_mem, 0) if machine_mem else MAX_MEM)
    cpus = set_cpus if set_cpus is not None else (
        max(machine_cpus - config.reserve_cpus, 0) if machine_cpus else MAX_CPUS)
    if mem <= 0:
        raise ConfigError(f"{source}: reserve_mem = {format_mem(config.reserve_mem)} leaves no memory for jobs on "
                          f"host {host}, whose machine has {format_mem(machine_mem or 0)}",
                          f"lower reserve_mem, or set mem under [hosts.{host}]")
    if cpus <= 0:
        raise ConfigError(f"{source}: reserve_cpus = {config.reserve_cpus} leaves no CPU for jobs on host {host}, "
                          f"whose machine has {cpus_text(machine_cpus or 0)}",
                          f"lower reserve_cpus, or set cpus under [hosts.{host}]")
    return Need(mem, cpus, slots)


def never_fits(config, need: Need, hosts: Mapping[str, tuple[int | None, int | None]], *,
               source: str) -> str:
    """Why no host of ``hosts`` (name → its machine's memory and CPUs) could ever run a job of ``need``, "" if one
    could. Raises ConfigError: none fits, and a host's reserve leaves it nothing (the config is at fault)."""
    problem, broken, sizes = "no host of the spool can run it", None, {}
    for host, machine in hosts.items():
        try:
            sizes[host] = host_capacity(config, host, machine, source=source)
        except ConfigError as err:
            broken = broken or err
            continue
        problem = too_big(need, sizes[host])
        if not problem:
            return ""
        problem += f" (host {host})"
    if broken:
        raise broken
    if len(sizes) > 1:  # one host's size alone would read as the spool's: say each one's, of what it lacks
        mem, cpus = (any(need.mem > c.mem for c in sizes.values()), any(need.cpus > c.cpus for c in sizes.values()))
        asked = " and ".join([f"{format_mem(need.mem)} memory"] * mem + [cpus_text(need.cpus)] * cpus)
        each = "; ".join(f"{host}: " + ", ".join([format_mem(c.mem)] * mem + [cpus_text(c.cpus)] * cpus)
                         for host, c in sizes.items())
        return f"it asks for {asked}, and no host of the spool has that much ({each})"
    return problem


def too_big(need: Need, capacity: Need) -> str:
    """Why a request can never be met on a host of ``capacity`` ("" if it can)."""
    parts = []
    if need.mem > capacity.mem:
        parts.append(f"{format_mem(need.mem)} memory, but the host has {format_mem(capacity.mem)}"
                     if capacity.mem > 0 else f"{format_mem(need.mem)} memory, but the host has none to give")
    if need.cpus > capacity.cpus:
        parts.append(f"{cpus_text(need.cpus)}, but the host has {capacity.cpus}")
    return ("it asks for " + " and ".join(parts)) if parts else ""
