"""accelerate, DeepSpeed, Lightning, torchtitan, megatron-core, NeMo and vLLM: the warnings and log
lines their distributed launch, training and serving code prints, read from each release's package on
PyPI (Python: accelerate, Lightning, torchtitan and NeMo as wheels, megatron-core as its cp311 x86_64
wheel (its Python files are the same in every build), DeepSpeed as its source distribution, the only
form it publishes, vLLM as its source distribution (a few MB, where its wheels are 300-500 MB of
kernels) and, for a release published without one, the kept files of its x86_64 wheel read by range
requests).

Each library names the releases read (the last of each minor from the one that came out beside
torch 2.0, spring 2023, to the newest), the files kept (the launcher, the process-group and strategy
code, the config plugins; not tests, apps, kernels or model code), and the calls that print a
message beside the ones torch uses (Lightning's rank_zero_*, DeepSpeed's log_dist and its op
builders' warning(), megatron-core's log_single_rank(logger, level, msg), torchtitan's
warn_once(logger, msg), vLLM's logger.info_once / error_once and, before 0.7, print_warning_once(msg)). Raised exceptions are left out: they reach the log as Python exceptions, which
the engine reads as such.
"""

import io
import os
import re
import tarfile
import zipfile

LIBS = {
    "accelerate": {
        "pypi": "accelerate",
        "form": "wheel",
        "versions": ["0.18.0", "0.19.0", "0.20.3", "0.21.0", "0.22.0", "0.23.0", "0.24.1", "0.25.0", "0.26.1",
                     "0.27.2", "0.28.0", "0.29.3", "0.30.1", "0.31.0", "0.32.1", "0.33.0", "0.34.2", "1.0.1",
                     "1.1.1", "1.2.1", "1.3.0", "1.4.0", "1.5.2", "1.6.0", "1.7.0", "1.8.1", "1.9.0", "1.10.1",
                     "1.11.0", "1.12.0", "1.13.0", "1.14.0", "1.15.0", "1.16.0"],
        "keep": re.compile(r"accelerate/(?!test_utils/|commands/menu/).*\.py$"),
    },
    "deepspeed": {
        "pypi": "deepspeed",
        "form": "sdist",
        "versions": ["0.7.7", "0.8.3", "0.9.5", "0.10.3", "0.11.2", "0.12.6", "0.13.5", "0.14.5", "0.15.4",
                     "0.16.9", "0.17.6", "0.18.9", "0.19.8"],
        # The launcher, comm, the runtime (engine, ZeRO, pipeline, config), accelerators, elasticity,
        # utils, and the op builders whose import-time warnings (`async_io requires the dev libaio`)
        # head most DeepSpeed logs.
        "keep": re.compile(r"(?:deepspeed/(?:launcher|comm|runtime|utils|accelerator|elasticity)/.*|deepspeed/[^/]+|"
                           r"op_builder/[^/]+)\.py$"),
    },
    "lightning": {
        "pypi": "lightning",
        "form": "wheel",
        "versions": ["2.0.9", "2.1.4", "2.2.5", "2.3.3", "2.4.0", "2.5.6", "2.6.6"],
        # lightning.fabric and lightning.pytorch (the same files as the pytorch_lightning and
        # lightning_fabric packages); not lightning.app, lightning.data, lightning.store.
        "keep": re.compile(r"lightning/(?:fabric|pytorch)/.*\.py$"),
    },
    "torchtitan": {
        "pypi": "torchtitan",
        "form": "wheel",
        "versions": ["0.1.0", "0.2.2", "0.3.0"],
        # The whole package (train.py, the trainer, parallelisms, checkpointing, data loaders, the
        # models and experiments that train.py runs): all of it is what a torchtitan job prints.
        "keep": re.compile(r"torchtitan/(?!.*(?:^|/)tests?/).*\.py$"),
    },
    "megatron-core": {
        "pypi": "megatron-core",
        "form": "wheel",
        "versions": ["0.5.0", "0.6.0", "0.7.0", "0.8.0", "0.9.0", "0.10.0", "0.11.0", "0.12.3", "0.13.1", "0.14.0",
                     "0.15.3", "0.16.1", "0.17.1", "0.18.2", "0.19.2"],
        # All of megatron/core: the library is the parallel state, distributed optimizer, pipeline
        # schedules, transformer layers, checkpointing and datasets of a Megatron job.
        "keep": re.compile(r"megatron/core/(?!.*(?:^|/)tests?/).*\.py$"),
    },
    "nemo": {
        "pypi": "nemo-toolkit",
        "form": "wheel",
        "versions": ["1.23.0", "2.0.0", "2.1.0", "2.2.1", "2.3.3", "2.4.1", "2.5.3", "2.6.2", "2.7.3", "3.0.0"],
        # The launch and training-loop paths, not the models, data sets and tokenizers of the
        # collections (ASR, TTS, multimodal, ...: four fifths of the package): nemo/core (ModelPT,
        # optimizers, save/restore), nemo/utils (exp_manager, callbacks, logging), nemo/lightning
        # (2.x: MegatronStrategy, MegatronParallel, fabric, resume, checkpoint IO), the 1.x Megatron
        # path in collections/nlp (nlp_overrides' strategies, the trainer builder, megatron_init,
        # MegatronBaseModel), collections/llm's api.py (2.x train/pretrain/finetune) and the common
        # callbacks.
        "keep": re.compile(r"nemo/(?:core|utils|lightning)/.*\.py$|"
                           r"nemo/collections/nlp/(?:parts/.*|modules/common/megatron/megatron_init|"
                           r"models/language_modeling/megatron_base_model)\.py$|"
                           r"nemo/collections/(?:llm/api|common/callbacks/.*)\.py$"),
    },
    "vllm": {
        "pypi": "vllm",
        "form": "sdist",
        # The last release of each minor from 0.4 (spring 2024) to the newest. 0.15 has no source
        # distribution on PyPI: its last release is read from the wheel (`remote`).
        "versions": ["0.4.3", "0.5.5", "0.6.6.post1", "0.7.3", "0.8.5.post1", "0.9.2", "0.10.2", "0.11.2", "0.12.0",
                     "0.13.0", "0.14.1", "0.15.1", "0.16.0", "0.17.1", "0.18.1", "0.19.1", "0.20.2", "0.21.0",
                     "0.22.1", "0.23.0", "0.24.0", "0.25.1", "0.26.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0",
                     "0.31.0", "0.32.0", "0.33.0", "0.34.0"],
        "remote": {"0.15.1"},
        # What a vLLM deployment prints around its parallel setup, not its models: the distributed
        # code (process groups, custom all-reduce, NCCL/SHM communicators, KV transfer, EPLB), the
        # executors and workers (V0 and V1), the engines, the platforms, the config and env modules
        # (config.py / config/, envs.py) and the utilities (utils.py / utils/: the multiprocessing
        # and thread setup). Not model_executor (models, layers, kernels), entrypoints, tokenizers,
        # LoRA, multimodal, attention backends or tests.
        "keep": re.compile(r"vllm/(?!.*(?:^|/)tests?/)(?:(?:distributed|executor|worker|engine|platforms|config|"
                           r"utils|usage|v1/(?:executor|worker|engine))/.*|config|envs|env_override|utils|v1/utils)"
                           r"\.py$"),
    },
    "transformers": {
        "pypi": "transformers",
        "form": "wheel",
        # Every fourth or so minor from 4.30 (spring 2023) to the newest; read by range requests
        # (the kept files are a tenth of the 10 MB wheel).
        "versions": ["4.30.2", "4.36.2", "4.40.2", "4.44.2", "4.46.3", "4.48.3", "4.51.3", "4.53.3", "4.55.4",
                     "4.57.6", "5.0.0", "5.4.0", "5.8.1", "5.12.1", "5.16.1", "5.20.2", "5.25.0"],
        "remote": "all",
        # What a distributed Trainer run prints: the Trainer and its arguments, the DeepSpeed, FSDP,
        # accelerate and tensor-parallel integrations, the model loading path (device_map, tp_plan)
        # and transformers.distributed; not the models, tokenizers or pipelines.
        "keep": re.compile(r"transformers/(?:trainer[^/]*|training_args[^/]*|modeling_utils|"
                           r"integrations/(?:deepspeed|fsdp|accelerate|tensor_parallel|integration_utils|tpu)|"
                           r"distributed/.*|utils/import_utils)\.py$"),
    },
    "sglang": {
        "pypi": "sglang",
        "form": "wheel",
        # 0.3's last, then a spread of the 0.4 and 0.5 patch releases (each one is a feature release).
        "versions": ["0.3.6.post3", "0.4.3.post4", "0.4.6.post5", "0.4.10.post2", "0.5.2", "0.5.5.post3", "0.5.9",
                     "0.5.13.post1", "0.5.17", "0.5.20", "0.5.23"],
        # The serving runtime around its parallel setup: distributed (process groups, custom
        # all-reduce, NCCL/SHM communicators), the managers (scheduler, tokenizer and detokenizer
        # processes, data-parallel controller), the model runner, entry points, EPLB, the
        # disaggregation transfer code, the MoE dispatchers (DeepEP), server args and utils.
        "keep": re.compile(r"sglang/srt/(?!.*(?:^|/)tests?/)(?:(?:distributed|managers|entrypoints|eplb|"
                           r"disaggregation|model_executor|layers/moe)/.*|server_args|utils|utils/.*|environ)\.py$"),
    },
    "ray": {
        "pypi": "ray",
        "form": "wheel",
        "versions": ["2.5.1", "2.9.3", "2.12.0", "2.24.0", "2.34.0", "2.40.0", "2.44.1", "2.48.0", "2.52.1",
                     "2.56.1", "2.60.0"],
        # 60-80 MB wheels of compiled core: only the Python files kept, by range requests.
        "remote": "all",
        # Ray Train (the torch backend's process-group setup, the worker group, the trainer loop),
        # ray.util.collective, and the core's Python side a job prints through (worker, node,
        # services, the accelerator managers, the log monitor).
        "keep": re.compile(r"ray/(?:train/(?!.*(?:^|/)tests?/).*|util/collective/(?!.*(?:^|/)tests?/).*|"
                           r"_private/(?:worker|node|services|utils|log_monitor|accelerators/[^/]+))\.py$"),
    },
    "transformer-engine": {
        "pypi": "transformer-engine",
        "form": "wheel",
        "versions": ["1.13.0", "2.1.0", "2.3.0", "2.5.0", "2.7.0", "2.9.0", "2.11.0", "2.13.0", "2.15.0", "2.17.1",
                     "2.20.2"],
        # The Python of the pure wheel: the common part and the PyTorch and JAX front ends (the
        # userbuffers / comm-overlap setup, FP8 recipes, distributed helpers); not the debug tools.
        "keep": re.compile(r"transformer_engine/(?:common|pytorch|jax)/(?!.*(?:^|/)tests?/).*\.py$"),
    },
    "jax": {
        "pypi": "jax",
        "form": "wheel",
        "versions": ["0.4.38", "0.5.3", "0.6.2", "0.7.2", "0.8.3", "0.9.2", "0.10.2", "0.11.2", "0.12.1"],
        # jax.distributed and its cluster detection (Slurm, MPI, k8s, cloud TPU), the backend
        # bring-up (xla_bridge: the `An NVIDIA GPU may be present ...` and plugin warnings), the
        # compiler and dispatch paths, multihost_utils.
        "keep": re.compile(r"jax/(?:_src/(?:distributed|xla_bridge|compiler|dispatch|config|clusters/[^/]+|"
                           r"multihost_utils)|experimental/multihost_utils)\.py$"),
    },
}


def calls(lib, base):
    """The call table of `lib`: torch's (`base`) without raise, and the library's own printers."""
    rank_zero = [
        (re.compile(r"(?<![\w.])rank_zero_warn\("), "rank_zero_warn", 0),
        (re.compile(r"(?<![\w.])rank_zero_info\("), "rank_zero_info", 0),
        (re.compile(r"(?<![\w.])rank_zero_deprecation\("), "rank_zero_deprecation", 0),
    ]
    own = {
        "lightning": rank_zero,
        # NeMo's trainer code calls Lightning's printers beside its own `logging` (nemo.utils).
        "nemo": rank_zero,
        # tools/logging.py's warn_once(logger, msg).
        "torchtitan": [(re.compile(r"(?<![\w.])warn_once\("), "warning", 1)],
        # megatron/core/utils.py's log_single_rank(logger, level, msg) and
        # log_on_each_pipeline_stage(logger, level, msg), and logger.log(level, msg): the level is
        # the positional argument before the message (kind `level`, generate.call_kind).
        "megatron-core": [
            (re.compile(r"(?<![\w.])(?:log_single_rank|log_on_each_pipeline_stage)\("), "level", 2),
            (re.compile(r"(?<![\w.])(?:logger|log|logging|_logger)\.log\("), "level", 1),
        ],
        # vllm/logger.py's _VllmLogger adds info_once / warning_once / error_once (the level is the
        # method's, generate.call_kind); before 0.7, vllm/utils.py's print_warning_once(msg).
        "vllm": [
            (re.compile(r"(?<![\w.])(?:logger|_logger|init_logger\(__name__\))\.(info_once|error_once)\("), None, 0),
            (re.compile(r"(?<![\w.])init_logger\(__name__\)\.(warning_once|warning|info)\("), None, 0),
            (re.compile(r"(?<![\w.])print_warning_once\("), "warning", 0),
        ],
        "deepspeed": [
            (re.compile(r"(?<![\w.])log_dist\("), "log_dist", 0),
            # op_builder's Builder.warning(msg) prints ` [WARNING]  msg`.
            (re.compile(r"(?<![\w])self\.warning\("), "warning", 0),
        ],
    }.get(lib, [])
    # A logger reached through a module or an object (DeepSpeed's comm.py: `utils.logger.warn(...)`,
    # `self.logger.warning(...)`): torch's table wants it bare.
    qualified = [(re.compile(r"(?<![\w.])(?:utils|self|cls)\.(?:logger|_logger|log)\."
                             r"(warning_once|warning|warn|error|info|exception|critical)\("), None, 0)]
    return [c for c in base if c[1] != "raise"] + qualified + own


def family(lib, path):
    """Which part of the library a file is (coverage counts by it)."""
    table = {
        "accelerate": [(r"commands/|launchers\.py|utils/launch\.py|utils/environment\.py", "launch"),
                       (r"state\.py|accelerator\.py|data_loader\.py", "state"),
                       (r"utils/(?:dataclasses|deepspeed|fsdp_utils|megatron_lm|constants)\.py", "plugins")],
        "deepspeed": [(r"deepspeed/launcher/", "launch"), (r"deepspeed/comm/", "comm"),
                      (r"deepspeed/runtime/zero/", "zero"), (r"deepspeed/runtime/", "runtime"),
                      (r"deepspeed/accelerator/", "accelerator"), (r"op_builder/", "ops"),
                      (r"deepspeed/elasticity/", "elastic")],
        "lightning": [(r"/strategies/", "strategy"), (r"/accelerators/|accelerator_connector", "accelerator"),
                      (r"/plugins/", "plugins"), (r"/trainer/|/loops/", "trainer"), (r"/callbacks/", "callbacks"),
                      (r"/loggers/", "loggers")],
        "torchtitan": [(r"/distributed/|parallelize", "parallel"), (r"checkpoint", "checkpoint"),
                       (r"datasets/|dataloader", "data"), (r"/models/|/experiments/", "models"),
                       (r"train\.py|trainer\.py|/components/|/config", "trainer")],
        "megatron-core": [(r"parallel_state|/distributed/|tensor_parallel/|pipeline_parallel/|process_groups|"
                           r"nccl_allocator", "parallel"), (r"dist_checkpointing/", "checkpoint"),
                          (r"optimizer", "optimizer"), (r"/datasets/", "data"), (r"/inference/", "inference"),
                          (r"/models/|/transformer/|/ssm/|/fusions/", "models")],
        "nemo": [(r"/strategies/|megatron_parallel|nlp_overrides|megatron_init|lightning/fabric/", "strategy"),
                 (r"checkpoint|ckpt|/io/|/connectors/", "checkpoint"), (r"exp_manager|/callbacks/", "callbacks"),
                 (r"/core/optim/", "optimizer"), (r"nemo/lightning/|trainer|llm/api\.py|megatron_base_model", "trainer")],
        "vllm": [(r"distributed/(?:kv_transfer|ec_transfer)/", "kv-transfer"), (r"vllm/distributed/", "distributed"),
                 (r"executor/", "executor"), (r"worker/", "worker"), (r"engine/", "engine"),
                 (r"platforms/", "platform"), (r"vllm/(?:config|envs|env_override)(?:/|\.py)", "config")],
        "transformers": [(r"/trainer|training_args", "trainer"), (r"integrations/deepspeed", "deepspeed"),
                         (r"integrations/fsdp|integrations/accelerate", "fsdp"),
                         (r"tensor_parallel|/distributed/|modeling_utils", "parallel")],
        "sglang": [(r"srt/distributed/", "distributed"), (r"srt/managers/", "managers"),
                   (r"srt/model_executor/", "runner"), (r"srt/disaggregation/", "disaggregation"),
                   (r"srt/layers/moe/|srt/eplb/", "moe"), (r"srt/entrypoints/", "entrypoints"),
                   (r"server_args|environ", "config")],
        "ray": [(r"ray/train/", "train"), (r"util/collective/", "collective"), (r"accelerators/", "accelerator"),
                (r"_private/", "core")],
        "transformer-engine": [(r"/pytorch/distributed|userbuffers|comm_gemm|/module/base", "distributed"),
                               (r"/jax/", "jax"), (r"fp8|recipe|quantiz", "fp8"), (r"/pytorch/", "pytorch")],
        "jax": [(r"distributed|clusters/|multihost", "distributed"), (r"xla_bridge", "backend"),
                (r"compiler|dispatch", "compiler"), (r"config", "config")],
    }[lib]
    for pat, fam in table:
        if re.search(pat, path):
            return fam
    return "other"


def pick(index, version, form):
    """The release's wheel (py3-none-any) or source distribution in the simple index."""
    found = []
    for f in index["files"]:
        name = f["filename"]
        if f.get("yanked") or not re.match(r"[A-Za-z_.-]+?-" + re.escape(version) + r"(?:-|\.tar\.gz$)", name):
            continue
        if form == "wheel" and name.endswith(".whl") or form == "sdist" and name.endswith(".tar.gz"):
            found.append(f)
    # A library built per platform (megatron-core): the cp311 x86_64 wheel, so that the file read
    # does not depend on the index's order; a pure-Python one has a single wheel.
    # A wheel built per platform without a cp311 build (vLLM's cp38-abi3): its x86_64 one.
    found.sort(key=lambda f: ("py3-none-any" not in f["filename"] and not ("cp311" in f["filename"] and
                                                                          "x86_64" in f["filename"]),
                              "x86_64" not in f["filename"]))
    return found[0] if found else None


def members(blob, name):
    """(path, bytes) of the .py files of a wheel or source distribution (the sdist's top folder cut)."""
    if name.endswith(".whl"):
        with zipfile.ZipFile(io.BytesIO(blob)) as z:
            for n in z.namelist():
                if n.endswith(".py"):
                    yield n, z.read(n)
        return
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as t:
        for m in t.getmembers():
            if m.isfile() and m.name.endswith(".py"):
                yield m.name.split("/", 1)[1] if "/" in m.name else m.name, t.extractfile(m).read()


def fetch(cache, simple_index, http_get, remote_zip=None, only=None):
    """Each release's kept files under CACHE/libs/LIB/VERSION/py/, its file name in `source`. A
    release in the library's `remote` set (or every release, `remote = "all"`) is read from its wheel
    by range requests (`remote_zip`, generate.RemoteZip): the kept files, not the whole wheel.
    `only`: the libraries to read (default all)."""
    for lib, spec in LIBS.items():
        if only and lib not in only:
            continue
        index = None
        for v in spec["versions"]:
            d = os.path.join(cache, "libs", lib, v)
            if os.path.exists(os.path.join(d, "done")):
                continue
            index = index or simple_index(spec["pypi"])
            remote = spec.get("remote") == "all" or v in spec.get("remote", ())
            form = "wheel" if remote else spec["form"]
            f = pick(index, v, form)
            if f is None:
                raise SystemExit(f"{spec['pypi']} {v}: no {form} on the index")
            if remote:
                z = remote_zip(f["url"], f["size"])
                got = z.read_many([n for n in z.members if n.endswith(".py") and spec["keep"].match(n)])
                files = sorted(got.items())
            else:
                files = members(http_get(f["url"]), f["filename"])
            for path, body in files:
                if not spec["keep"].match(path):
                    continue
                p = os.path.join(d, "py", path)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "wb") as out:
                    out.write(body)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "source"), "w") as out:
                out.write(f["filename"] + "\n")
            open(os.path.join(d, "done"), "w").close()


def releases(cache, lib):
    """The releases of `lib` in the cache, in order, with the file each was read from."""
    out = []
    for v in LIBS[lib]["versions"]:
        d = os.path.join(cache, "libs", lib, v)
        if os.path.exists(os.path.join(d, "done")):
            out.append((v, open(os.path.join(d, "source")).read().strip()))
    return out
