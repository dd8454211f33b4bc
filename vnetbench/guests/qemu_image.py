"""What a qemu guest boots: Debian's cloud kernel and its modules, taken from apt and unpacked into a cache (never
installed as this machine's kernel), and a small initramfs made here.

    python -m vnetbench.guests.qemu_image [--package linux-image-6.1.0-56-cloud-amd64] [--cache DIR] [--check MOD..]

prints the kernel, module tree and initramfs it prepared, and whether the kernel has the modules checked (install.sh
runs it; it does nothing more when they are there). A run never downloads: it boots a kernel already in the cache
(`cached_kernel`), and guests/qemu.py says so as the skip reason when there is none. Beside the bzImage it keeps the
uncompressed vmlinux (`lz4` from Debian's lz4 package unpacks the cloud kernel's payload), which qemu boots through
the PVH entry.

The kernel: `apt-get download` of the package the meta-package linux-image-cloud-amd64 depends on, `dpkg-deb -x` into
<cache>/qemu/<package>/ (boot/vmlinuz-*, lib/modules/<version>/), then `depmod -b` there (the package's postinst,
which does it on an install, never runs). The cloud kernel has what the studies used as modules (wireguard,
openvswitch, geneve, ip_gre, esp4, ah4, vxlan, 8021q) and virtio (virtio_pci, virtio_net, virtio_console) and
virtiofs, but NOT 9p (CONFIG_NET_9P is not set): the guest's root is this machine's root over virtiofs, served by
qemu's own virtiofsd (/usr/lib/qemu/virtiofsd in Debian 12's qemu-system-common).

The initramfs (a newc cpio written here, no `cpio` needed): busybox-static's /bin/busybox, the modules needed before
the root is mounted (with their dependencies, from modules.dep), and /init, which
  - mounts proc, sys, devtmpfs and loads those modules,
  - names and addresses the NICs the kernel command line asks for: `vb.nic=<mac>,<name>[,<address/len>]` (by MAC:
    the order of PCI slots is not the order of names), `vb.hostname=<name>`,
  - mounts the virtiofs tag `vb.root=<tag>` (default vbroot; `vb.rootfs=9p`: a 9p tag) read-only at /newroot,
  - sources `vb.setup=<path>` there with busybox's sh (the guest's own files: tmpfs, keys, module path, shares;
    written per guest by guests/qemu.py, with R=/newroot),
  - moves /dev, /proc and /sys there and switch_roots into `vb.init=<path>` (stage 2: sshd, the agent's serial port,
    reaping).
A failure prints `VNETBENCH-GUEST-FAILED: <why>` on the console and powers the guest off.
"""
from __future__ import annotations

import argparse
import fcntl
import gzip
import hashlib
import io
import lzma
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

META_PACKAGE = "linux-image-cloud-amd64"
BUSYBOX = Path("/bin/busybox")  # Debian package busybox-static: no libraries to carry
ROOT_TAG = "vbroot"
INITRD = "vnetbench-initrd.cpio"  # beside the kernel in the cache
FAIL_MARK = "VNETBENCH-GUEST-FAILED"
# needed before the root is mounted (their dependencies come along): the PCI transport, the NICs (named at stage 1),
# the agent's serial port, the root file system, the overlay that makes root's home writable; and tun, whose
# /dev/net/tun nothing would autoload (wireguard-go, strongSwan's kernel-libipsec open it)
EARLY_MODULES = ("virtio_pci", "virtio_net", "virtio_console", "virtiofs", "overlay", "tun")
# taken too where the kernel has them (Debian's generic kernel; the cloud kernel has no 9p): a root over 9p
OPTIONAL_EARLY = ("9pnet_virtio", "9p")


def cache_dir() -> Path:
    return Path(os.environ.get("VNETBENCH_CACHE_DIR", "/var/cache/vnetbench")) / "qemu"


class ImageError(RuntimeError):
    """The guest's kernel or initramfs could not be had (with what to do)."""


@dataclass(frozen=True)
class KernelTree:
    package: str        # linux-image-6.1.0-56-cloud-amd64 (or "custom")
    version: str        # 6.1.0-56-cloud-amd64: `uname -r` in the guest
    vmlinuz: Path
    root: Path          # holds lib/modules/<version>: modprobe -d <root>

    @property
    def modules(self) -> Path:
        return self.root / "lib" / "modules" / self.version


@dataclass(frozen=True)
class Image:
    kernel: KernelTree
    initrd: Path
    pvh: Path | None = None  # the uncompressed vmlinux, booted instead of the bzImage when there

    @property
    def boot_kernel(self) -> Path:
        return self.pvh or self.kernel.vmlinuz


# ---- the kernel from apt ----------------------------------------------------------------------------------------
def kernel_package(meta: str = META_PACKAGE) -> str:
    """The versioned image package the meta-package stands for (linux-image-6.1.0-56-cloud-amd64)."""
    out = subprocess.run(["apt-cache", "depends", "--important", meta], capture_output=True, text=True, timeout=60)
    for line in out.stdout.splitlines():
        line = line.strip()
        if line.startswith("Depends:") and "linux-image-" in line:
            return line.split(":", 1)[1].strip()
    raise ImageError(f"apt knows no {meta} (run `apt-get update`?): {out.stderr.strip() or 'no Depends'}")


def cached_kernels(cache: Path | None = None) -> list[KernelTree]:
    """Kernels already unpacked in the cache, newest version last."""
    cache = cache or cache_dir()
    found = []
    for d in sorted(cache.glob("linux-image-*")) if cache.is_dir() else []:
        if (d / ".complete").exists():
            if tree := _tree(d, d.name):
                found.append(tree)
    return sorted(found, key=lambda t: _version_key(t.version))


def cached_kernel(package: str | None = None, cache: Path | None = None) -> KernelTree | None:
    """The kernel a guest boots, from the cache only (nothing downloaded): the named package, else the newest cloud
    kernel (else the newest of any)."""
    kernels = cached_kernels(cache)
    if package:
        kernels = [k for k in kernels if k.package == package]
    else:
        kernels = [k for k in kernels if "-cloud-" in k.package] or kernels
    return kernels[-1] if kernels else None


def _version_key(v: str) -> list:
    return [int(p) if p.isdigit() else p for p in v.replace("-", ".").split(".")]


def _tree(root: Path, package: str) -> KernelTree | None:
    versions = sorted(p.name for p in (root / "lib" / "modules").glob("*") if p.is_dir())
    if not versions:
        return None
    v = versions[-1]
    vmlinuz = root / "boot" / f"vmlinuz-{v}"
    return KernelTree(package, v, vmlinuz, root) if vmlinuz.exists() else None


def ensure_kernel(package: str | None = None, cache: Path | None = None, offline_ok: bool = True) -> KernelTree:
    """The cloud kernel unpacked in the cache, downloaded through apt on first use (one process at a time: a lock)."""
    cache = cache or cache_dir()
    try:
        package = package or kernel_package()
    except (ImageError, OSError, subprocess.TimeoutExpired):
        if offline_ok and (have := cached_kernels(cache)):
            return have[-1]
        raise
    dest = cache / package
    if (dest / ".complete").exists() and (tree := _tree(dest, package)):
        return tree
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (dest / ".complete").exists() and (tree := _tree(dest, package)):
            return tree
        work = Path(tempfile.mkdtemp(prefix=f".{package}.", dir=cache))
        try:
            os.chmod(work, 0o755)  # apt's download sandbox user (_apt) writes the .deb there
            r = subprocess.run(["apt-get", "download", "-q", package], cwd=work, capture_output=True, text=True,
                               timeout=600)
            debs = list(work.glob("*.deb"))
            if r.returncode or not debs:
                raise ImageError(f"apt-get download {package} failed: {r.stderr.strip()[-400:]}")
            root = work / "root"
            subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(root)], check=True, capture_output=True, timeout=600)
            tree = _tree(root, package)
            if tree is None:
                raise ImageError(f"{debs[0].name} holds no boot/vmlinuz-* with lib/modules/")
            # the package's postinst would run depmod; it never runs here: modprobe needs modules.dep
            subprocess.run(["depmod", "-b", str(root), tree.version], check=True, capture_output=True, timeout=300)
            debs[0].unlink()
            if dest.exists():
                shutil.rmtree(dest)
            root.rename(dest)
            (dest / ".complete").write_text(debs[0].name + "\n")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return _tree(dest, package)


# the compressed payload inside a bzImage, by its magic: what decompresses it (a command reading stdin, or Python)
_PAYLOADS = ((b"\x02\x21\x4c\x18", ["lz4", "-dc"]), (b"\x28\xb5\x2f\xfd", ["zstd", "-dcq"]),
             (b"\xfd7zXZ\x00", "xz"), (b"\x1f\x8b\x08", "gzip"))


def pvh_kernel(tree: KernelTree) -> Path | None:
    """The uncompressed ELF vmlinux beside the bzImage (made once), which qemu boots through the kernel's PVH entry
    (CONFIG_PVH): no decompression by an emulated CPU, which took ~1 s of a TCG boot here. None when the kernel has
    no PVH entry or its payload cannot be unpacked here (the bzImage is booted then)."""
    out = tree.root / "boot" / f"vmlinux-{tree.version}"
    if out.exists():
        return out
    config = tree.root / "boot" / f"config-{tree.version}"
    if not config.exists() or "\nCONFIG_PVH=y\n" not in config.read_text():
        return None
    data = tree.vmlinuz.read_bytes()
    for magic, how in _PAYLOADS:
        pos = data.find(magic)
        if pos < 0:
            continue
        try:
            if how == "gzip":
                elf = gzip.GzipFile(fileobj=io.BytesIO(data[pos:])).read()
            elif how == "xz":
                elf = lzma.LZMADecompressor().decompress(data[pos:])
            elif shutil.which(how[0]):
                # (a bzImage has data after its payload: the tools say so and still write the whole kernel)
                elf = subprocess.run(how, input=data[pos:], capture_output=True, timeout=120).stdout
            else:
                continue
        except (OSError, EOFError, lzma.LZMAError, subprocess.TimeoutExpired):
            continue
        if elf[:4] == b"\x7fELF":
            tmp = out.with_name(f".{out.name}.{os.getpid()}")
            tmp.write_bytes(elf)
            tmp.replace(out)
            return out
    return None


def custom_kernel(vmlinuz: Path, modules_root: Path) -> KernelTree:
    """A kernel image the user names (the testbed file), with a tree holding its lib/modules/<version>."""
    tree = _tree(modules_root, "custom")
    if tree is None:
        raise ImageError(f"{modules_root} has no lib/modules/<version>")
    return KernelTree("custom", tree.version, Path(vmlinuz), modules_root)


# ---- modules ------------------------------------------------------------------------------------------------------
def _norm(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    for ext in (".ko", ".ko.xz", ".ko.zst", ".ko.gz"):
        if base.endswith(ext):
            base = base[: -len(ext)]
    return base.replace("-", "_")


def module_closure(tree: KernelTree, names) -> list[str]:
    """The module files (relative to the module tree) to insmod in that order for `names`, dependencies first;
    built-in modules are skipped."""
    deps: dict[str, tuple[str, list[str]]] = {}
    for line in (tree.modules / "modules.dep").read_text().splitlines():
        if ":" in line:
            path, rest = line.split(":", 1)
            deps[_norm(path)] = (path, rest.split())
    builtin = set()
    if (tree.modules / "modules.builtin").exists():
        builtin = {_norm(ln) for ln in (tree.modules / "modules.builtin").read_text().split()}
    order: list[str] = []

    def visit(name: str) -> None:
        name = _norm(name)
        if name in builtin:
            return
        if name not in deps:
            raise ImageError(f"kernel {tree.version} has no module {name}")
        path, needs = deps[name]
        for dep in reversed(needs):  # modules.dep lists them so that the last is loaded first
            visit(dep)
        if path not in order:
            order.append(path)

    for n in names:
        visit(n)
    return order


def has_module(tree: KernelTree, name: str) -> bool:
    name = _norm(name)
    try:
        module_closure(tree, [name])
        return True
    except ImageError:
        builtin = tree.modules / "modules.builtin"
        return builtin.exists() and name in {_norm(x) for x in builtin.read_text().split()}


# ---- the initramfs --------------------------------------------------------------------------------------------------
INIT = f"""#!/bin/sh
# vnetbench qemu guest, stage 1 (initramfs): early modules, NICs from the kernel command line, the root over
# virtiofs, then the guest's own stage 2 on that root
/bin/busybox --install -s /bin
export PATH=/bin
fail() {{ echo "{FAIL_MARK}: $*"; sleep 1; poweroff -f; }}
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
root={ROOT_TAG}; rootfs=virtiofs; init=; setup=; nics=; trace=
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    vb.trace=1) trace=1 ;;
    vb.root=*) root=${{arg#vb.root=}} ;;
    vb.rootfs=*) rootfs=${{arg#vb.rootfs=}} ;;
    vb.init=*) init=${{arg#vb.init=}} ;;
    vb.setup=*) setup=${{arg#vb.setup=}} ;;
    vb.hostname=*) hostname "${{arg#vb.hostname=}}" ;;
    vb.nic=*) nics="$nics ${{arg#vb.nic=}}" ;;
  esac
done
t() {{ [ -z "$trace" ] || echo "vb-init $* $(cut -d' ' -f1 /proc/uptime)"; }}
t modules
for m in $(cat /modules); do insmod /lib/modules/$m || fail "insmod $m"; t "$m"; done
ip link set lo up
for spec in $nics; do
  set -- $(echo "$spec" | tr , ' ')
  dev=
  for d in /sys/class/net/*; do [ "$(cat $d/address)" = "$1" ] && dev=${{d##*/}}; done
  [ -n "$dev" ] || fail "no NIC with MAC $1 (for $2)"
  [ "$dev" = "$2" ] || ip link set "$dev" name "$2" || fail "rename $dev to $2"
  [ -z "$3" ] || ip addr add "$3" dev "$2" || fail "address $3 on $2"
  ip link set "$2" up
done
[ -n "$init" ] || fail "no vb.init= on the kernel command line"
mkdir -p /newroot
case "$rootfs" in
  9p) mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=512000,cache=loose "$root" /newroot ||
        fail "mount 9p $root" ;;
  *) mount -t virtiofs -o ro "$root" /newroot || fail "mount virtiofs $root" ;;
esac
t mounted
# the guest's own setup, by this busybox (each program run from the root costs its binary's and libraries' reads
# through virtiofs, on an emulated CPU): R is where the root is mounted
R=/newroot
[ -z "$setup" ] || . "$R$setup" || fail "setup $setup"
t setup
[ -x "$R$init" ] || fail "stage 2 $init is not there"
for m in dev proc sys; do mount --move /$m $R/$m || fail "move /$m"; done
exec switch_root /newroot "$init"
"""


def _cpio_entry(out: io.BufferedIOBase, ino: int, name: str, mode: int, data: bytes = b"",
                rdev: tuple[int, int] = (0, 0)) -> None:
    nb = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, 2 if stat.S_ISDIR(mode) else 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(nb), 0]
    out.write(b"070701" + b"".join(b"%08X" % f for f in fields) + nb)
    out.write(b"\0" * (-(110 + len(nb)) % 4))
    out.write(data)
    out.write(b"\0" * (-len(data) % 4))


def write_cpio(entries, out: io.BufferedIOBase) -> None:
    """A newc archive (what the kernel unpacks as an initramfs) of (name, mode, data, rdev) entries."""
    for ino, (name, mode, data, rdev) in enumerate(entries, 1):
        _cpio_entry(out, ino, name, mode, data, rdev)
    _cpio_entry(out, 0, "TRAILER!!!", 0)


def build_initramfs(tree: KernelTree, out: Path, modules=EARLY_MODULES, busybox: Path = BUSYBOX,
                    compress: bool = False) -> Path:
    """Write the initramfs for `tree` to `out` (atomically); uncompressed by default: the kernel unpacks it faster
    under an emulated CPU than it inflates a gzip one, and it is a few MB."""
    if not busybox.exists():
        raise ImageError(f"{busybox} is missing (Debian package busybox-static)")
    files = module_closure(tree, [*modules, *(m for m in OPTIONAL_EARLY if has_module(tree, m))])
    entries = [(d, stat.S_IFDIR | 0o755, b"", (0, 0))
               for d in ("bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules")]
    entries.append(("dev/console", stat.S_IFCHR | 0o600, b"", (5, 1)))
    entries.append(("bin/busybox", stat.S_IFREG | 0o755, busybox.read_bytes(), (0, 0)))
    entries.append(("bin/sh", stat.S_IFLNK | 0o777, b"busybox", (0, 0)))
    entries.append(("init", stat.S_IFREG | 0o755, INIT.encode(), (0, 0)))
    dirs = set()
    for f in files:
        parts = f.split("/")[:-1]
        for k in range(1, len(parts) + 1):
            d = "lib/modules/" + "/".join(parts[:k])
            if d not in dirs:
                dirs.add(d)
                entries.append((d, stat.S_IFDIR | 0o755, b"", (0, 0)))
        entries.append((f"lib/modules/{f}", stat.S_IFREG | 0o644, (tree.modules / f).read_bytes(), (0, 0)))
    entries.append(("modules", stat.S_IFREG | 0o644, ("\n".join(files) + "\n").encode(), (0, 0)))
    buf = io.BytesIO()
    write_cpio(entries, buf)
    data = buf.getvalue()
    if compress:
        data = gzip.compress(data, 6)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    tmp.write_bytes(data)
    tmp.replace(out)
    return out


def _initrd_stamp() -> str:
    """What the initramfs is made of: its init, its module list and busybox (not this file's time: checkouts of the
    same code share the cache without making it again and again)."""
    bb = BUSYBOX.stat() if BUSYBOX.exists() else None
    what = f"{INIT}\n{EARLY_MODULES}\n{OPTIONAL_EARLY}\n{bb.st_size if bb else 0}:{bb.st_mtime_ns if bb else 0}"
    return hashlib.sha256(what.encode()).hexdigest()


def image_of(tree: KernelTree) -> Image:
    """A kernel's initramfs (made once, beside it, and again when what it is made of changes) and PVH vmlinux."""
    initrd = tree.root / INITRD
    stamp, stamp_file = _initrd_stamp(), tree.root / ".initrd-stamp"
    if not initrd.exists() or not stamp_file.exists() or stamp_file.read_text() != stamp:
        build_initramfs(tree, initrd)
        tmp = stamp_file.with_name(f".{stamp_file.name}.{os.getpid()}")
        tmp.write_text(stamp)
        tmp.replace(stamp_file)
    return Image(tree, initrd, pvh_kernel(tree))


def ensure_image(package: str | None = None, cache: Path | None = None) -> Image:
    """Kernel (downloaded through apt when it is not in the cache: install.sh) and its initramfs."""
    return image_of(ensure_kernel(package, cache))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vnetbench.guests.qemu_image", description=__doc__.split("\n\n")[0])
    ap.add_argument("--package", help=f"kernel image package (default: what {META_PACKAGE} depends on)")
    ap.add_argument("--cache", type=Path, help=f"cache folder (default {cache_dir()})")
    ap.add_argument("--check", nargs="*", default=["wireguard", "openvswitch", "geneve", "ip_gre", "esp4", "ah4",
                                                   "vxlan", "8021q", "virtio_net", "virtiofs"],
                    help="modules the kernel must have")
    ap.add_argument("-q", "--quiet", action="store_true", help="one line")
    ap.add_argument("--cached-ok", action="store_true",
                    help="a kernel already in the cache will do: apt is not asked for the newest (about 2 s)")
    ap.add_argument("--initramfs", type=Path, metavar="FILE",
                    help="only write to FILE the initramfs of the kernel whose module tree --modules names (what a "
                         "lab host's qemu guests boot; this module is copied there and run by its python3)")
    ap.add_argument("--modules", type=Path, metavar="DIR", help="<root>/lib/modules/<version>, for --initramfs")
    args = ap.parse_args(argv)
    if args.initramfs:
        return _initramfs_only(args.initramfs, args.modules)
    try:
        tree = cached_kernel(args.package, args.cache) if args.cached_ok else None
        img = image_of(tree) if tree else ensure_image(args.package, args.cache)
    except (ImageError, OSError, subprocess.SubprocessError) as exc:
        print(f"qemu_image: {exc}", file=sys.stderr)
        return 1
    missing = [m for m in args.check if not has_module(img.kernel, m)]
    if args.quiet:
        print(f"qemu guests: kernel {img.kernel.version} in {img.kernel.root}" +
              (f"; it lacks {', '.join(missing)}" if missing else ""))
        return 1 if missing else 0
    print(f"kernel   {img.kernel.vmlinuz} ({img.kernel.package}, {img.kernel.version})")
    print(f"pvh      {img.pvh or 'none (the bzImage is booted)'}")
    print(f"modules  {img.kernel.modules}")
    print(f"initrd   {img.initrd} ({img.initrd.stat().st_size // 1024} KiB)")
    print(f"checked  {', '.join(args.check)}: " + (f"MISSING {', '.join(missing)}" if missing else "all present"))
    return 1 if missing else 0


def _initramfs_only(out: Path, modules: Path | None) -> int:
    if modules is None or len(modules.parents) < 3:
        print("qemu_image: --initramfs needs --modules <root>/lib/modules/<version>", file=sys.stderr)
        return 2
    tree = KernelTree("host", modules.name, Path(""), modules.parents[2])
    try:
        build_initramfs(tree, out)
    except (ImageError, OSError) as exc:
        print(f"qemu_image: initramfs of {modules}: {exc}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
