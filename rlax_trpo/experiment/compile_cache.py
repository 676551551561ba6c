"""The persistent compilation cache of the command and of `rlax_trpo.run`: compiled programs
kept per user, so that a second run of the same config, `--resume` and `eval` read them back
instead of compiling them again (docs/operations.md, "The compilation cache").

`setup_compile_cache` runs before the first compilation of `rlax-trpo train`, `rlax-trpo eval`
(`python train.py`) and `rlax_trpo.run`, never in the library's pure functions (`make_train`
and the rest compile nothing themselves). It is jax configuration only (`jax.config.update`
starts no backend, so it leaves `rlax_trpo.platform.setup_cpu` free to choose the devices
after it) plus one patch on jax 0.10: jax leaves out of its cache every program that calls
back to Python, and the progress bar is such a callback inside the training program
(`cache_programs_with_host_callbacks`).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlax_trpo.platform import cpu_signature

COMPILE_CACHE_OPT_OUT = "RLAX_TRPO_COMPILE_CACHE"
# The environment variables that choose a process's persistent cache, or turn it off (besides
# XDG_CACHE_HOME, where the per-user folder lies).
CACHE_VARIABLES = (
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
    "JAX_COMPILATION_CACHE_MAX_SIZE",
    "JAX_ENABLE_COMPILATION_CACHE",
    COMPILE_CACHE_OPT_OUT,
)
# The per-user cache's bound: past it, jax removes the least recently used executables. The
# default CartPole run's 11 programs take 0.5 MB (benchmarks/compile_cache.py).
COMPILE_CACHE_MAX_BYTES = 2**30
# jax options set for the per-user cache, with jax's defaults: an option the user set (its
# JAX_... environment variable, or a value other than the default) is left as it is. Every
# program is cached, however small or quick to compile: reading one back costs a file read.
_CACHE_OPTIONS = {
    "jax_persistent_cache_min_compile_time_secs": (1.0, 0.0),
    "jax_persistent_cache_min_entry_size_bytes": (0, -1),
    "jax_compilation_cache_max_size": (-1, COMPILE_CACHE_MAX_BYTES),
}
_compile_cache_chosen: list[bool] = []  # once per process: the first entry point decides


def compile_cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The per-user folder of compiled programs: `$XDG_CACHE_HOME/rlax_trpo/jax/cpu-<hash>`,
    else `~/.cache/rlax_trpo/jax/cpu-<hash>` (an XDG_CACHE_HOME that is not an absolute path
    is ignored, as the XDG spec asks). One folder per host CPU (`cpu_signature()`): XLA
    compiles CPU code for the host's instruction set and refuses an executable built for
    another, so a home directory shared by different machines keeps one cache for each."""
    import hashlib

    base = environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    cpu = hashlib.sha256(cpu_signature().encode()).hexdigest()[:12]
    return root / "rlax_trpo" / "jax" / f"cpu-{cpu}"


def setup_compile_cache(enabled: bool = True, environ: Mapping[str, str] = os.environ) -> bool:
    """Before the first compilation of a command or a run (`rlax-trpo train`, `eval`,
    `rlax_trpo.run`): jax's persistent compilation cache in `compile_cache_dir()`, bounded
    to `COMPILE_CACHE_MAX_BYTES`, for every program (no minimum compile time or size), and
    programs with host callbacks (the progress bar) cached too. Returns whether a cache is on.

    A cache the user configured through jax (JAX_COMPILATION_CACHE_DIR, its other JAX_...
    variables, `jax.config`) is used as configured instead. `enabled=False`
    (`--no-compile-cache`) or `RLAX_TRPO_COMPILE_CACHE=0` turn every persistent cache off in
    this process. A folder that cannot be written leaves the run without a cache and one line
    on stderr. Only the first call in a process decides; starts no backend.
    """
    if _compile_cache_chosen:
        return _compile_cache_chosen[0]
    import jax

    off = environ.get(COMPILE_CACHE_OPT_OUT, "").strip().lower() in ("0", "false", "no", "off")
    if not enabled or off:
        _no_compile_cache()
    users = "JAX_COMPILATION_CACHE_DIR" in environ or jax.config.jax_compilation_cache_dir
    on = bool(jax.config.jax_enable_compilation_cache)
    if on and not users:
        on = _own_cache_folder(environ)
    on = on and bool(jax.config.jax_compilation_cache_dir)
    if on:
        cache_programs_with_host_callbacks()
    _compile_cache_chosen.append(on)
    return on


def _no_compile_cache() -> None:
    """jax reads and writes no persistent cache from now on in this process."""
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    try:  # jax decides whether to use its cache at the first compilation: decide again
        from jax.experimental.compilation_cache import compilation_cache

        compilation_cache.reset_cache()
    except (ImportError, AttributeError):
        pass


def _own_cache_folder(environ: Mapping[str, str]) -> bool:
    """jax's cache in `compile_cache_dir()` with `_CACHE_OPTIONS`; False and one line on stderr
    when the folder cannot be made or written."""
    import tempfile

    import jax

    try:
        folder = compile_cache_dir(environ)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # only its user may write it
        with tempfile.TemporaryFile(dir=folder):
            pass
    except (OSError, RuntimeError, KeyError) as err:  # Path.home() without a home: the latter
        reason = getattr(err, "strerror", None) or str(err)
        where = f" {getattr(err, 'filename', None) or ''}".rstrip()
        if isinstance(err, (FileExistsError, NotADirectoryError)):  # a file where a folder goes
            path = Path(err.filename or folder)
            blocking = next((p for p in (path, *path.parents) if p.is_file()), path)
            where, reason = f" {blocking}", "it is a file, not a folder"
        print(
            f"note: compiling without a cache (cannot write{where}: {reason}; "
            f"{COMPILE_CACHE_OPT_OUT}=0 turns the cache off)",
            file=sys.stderr,
            flush=True,
        )
        return False
    jax.config.update("jax_compilation_cache_dir", str(folder))
    for name, (default, value) in _CACHE_OPTIONS.items():
        if name == "jax_compilation_cache_max_size" and not _has_module("filelock"):
            continue  # jax's bounded cache locks its folder with filelock
        if name.upper() not in environ and getattr(jax.config, name) == default:
            jax.config.update(name, value)
    return True


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


# The host callbacks of the program being compiled on this thread, when they can be cached.
_compiling = threading.local()
# Platforms whose Python callbacks are XLA FFI calls that name their callback by its index in
# the executable's list (jax 0.10: `xla_ffi_python_cpu_callback`); on TPU they are send/recv.
_CALLBACK_PLATFORMS = ("cpu",)
_CALLBACK_KEY = "rlax_trpo: host callbacks given on load"


def cache_programs_with_host_callbacks() -> bool:
    """Let jax's persistent cache keep programs that call back to Python (`jax.debug.callback`,
    `io_callback`, `pure_callback`) on CPU, as it keeps the others.

    jax 0.10 never writes such a program (the callbacks are Python objects of the process
    that compiled it); yet on CPU the compiled code names each callback by its index in the
    list the executable is loaded with, and the program's HLO, which is the cache key, fixes
    that list. So the executable is written without its callbacks, and read back with the
    callbacks of the current lowering of the same program. Those entries get a distinct key
    (jax's `custom_hook`), so a jax without this patch never reads one. Uses jax's private
    compiler modules; returns False and changes nothing where they are not as expected, as on
    jax 0.11, which caches these programs itself (seen on CPU and on a GPU with jax 0.11.2).
    """
    try:
        from jax._src import cache_key, compilation_cache, compiler
        from jax._src.lib import xla_client
    except ImportError:
        return False
    if getattr(compiler.compile_or_get_cached, "_rlax_trpo", False):
        return True
    expected = {  # the private functions the patch wraps or calls, with their parameters
        (compiler, "compile_or_get_cached"): "backend computation devices compile_options "
        "host_callbacks",
        (compiler, "_cache_write"): "cache_key compile_time_secs module_name backend "
        "executable host_callbacks",
        (compilation_cache, "get_executable_and_time"): "cache_key compile_options backend "
        "executable_devices",
        (compilation_cache, "_get_cache"): "backend",
        (compilation_cache, "decompress_executable"): "executable",
        (compilation_cache, "extract_executable_and_time"): "executable_and_time",
        (cache_key, "custom_hook"): "",
    }
    for (module, name), parameters in expected.items():
        if not _takes(getattr(module, name, None), parameters.split()):
            return False
    loads = getattr(getattr(xla_client, "Client", None), "deserialize_executable", None)
    if "host_callbacks" not in (getattr(loads, "__doc__", None) or ""):
        return False
    _patch_compiler(compiler, compilation_cache, cache_key)
    return True


def _takes(function: Callable[..., Any] | None, parameters: list[str]) -> bool:
    """Whether `function` exists and its first parameters are named `parameters`."""
    import inspect

    try:
        names = list(inspect.signature(function).parameters)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return names[: len(parameters)] == parameters


def _patch_compiler(compiler: Any, compilation_cache: Any, cache_key: Any) -> None:
    """`cache_programs_with_host_callbacks`' four wrappers: remember the callbacks while a
    program compiles, key its entry apart, write it without them, read it with them."""
    compile_or_get_cached = compiler.compile_or_get_cached
    cache_write = compiler._cache_write
    read = compilation_cache.get_executable_and_time
    custom_hook = cache_key.custom_hook

    def compiling(backend, computation, devices, compile_options, host_callbacks, *args, **kw):
        outer = getattr(_compiling, "callbacks", ())
        cacheable = host_callbacks and backend.platform in _CALLBACK_PLATFORMS
        _compiling.callbacks = tuple(host_callbacks) if cacheable else ()
        try:
            return compile_or_get_cached(
                backend, computation, devices, compile_options, host_callbacks, *args, **kw
            )
        finally:
            _compiling.callbacks = outer

    def writing(key, seconds, module_name, backend, executable, host_callbacks):
        if host_callbacks and tuple(host_callbacks) == getattr(_compiling, "callbacks", ()):
            host_callbacks = []
        return cache_write(key, seconds, module_name, backend, executable, host_callbacks)

    def reading(key, compile_options, backend, executable_devices):
        callbacks = getattr(_compiling, "callbacks", ())
        cache = compilation_cache._get_cache(backend) if callbacks else None
        if cache is None:
            return read(key, compile_options, backend, executable_devices)
        entry = cache.get(key)
        if entry is None:
            return None, None
        entry = compilation_cache.decompress_executable(entry)
        serialized, seconds = compilation_cache.extract_executable_and_time(entry)
        executable = backend.deserialize_executable(
            serialized, executable_devices, compile_options, host_callbacks=list(callbacks)
        )
        return executable, seconds

    def hook() -> str:
        marked = bool(getattr(_compiling, "callbacks", ()))
        return custom_hook() + (_CALLBACK_KEY if marked else "")

    compiling._rlax_trpo = True  # type: ignore[attr-defined]
    compiler.compile_or_get_cached = compiling
    compiler._cache_write = writing
    compilation_cache.get_executable_and_time = reading
    cache_key.custom_hook = hook
