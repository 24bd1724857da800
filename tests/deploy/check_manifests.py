#!/usr/bin/python3
"""Structure check of the Kubernetes manifests in deploy/kubernetes.

Checks what a schema validator cannot: that the objects fit together (the
selectors pick the pods, the probes hit the gRPC port, the autoscaler scales
this Deployment), that the pod is locked down, that the drain on SIGTERM fits
the termination grace period, and that every flag in the container args is one
the built quantd really has (from `quantd --help`).

Usage:
  check_manifests.py --quantd=BIN [--dockerfile=Dockerfile] DIR_OR_FILE...
A directory is read through its kustomization.yaml (every listed file, and
every YAML file in it must be listed); a file (or "-" for stdin, e.g. the
output of `kubectl kustomize`) is read as a YAML stream.
Prints every problem found and exits 1 if there is any.
"""

import argparse
import os
import re
import subprocess
import sys

import yaml

EXPECTED_API = {
    "Deployment": "apps/v1",
    "Service": "v1",
    "HorizontalPodAutoscaler": "autoscaling/v2",
    "PodDisruptionBudget": "policy/v1",
}

# A quantize call peaks at about 2.5x its model in server memory
# (docs/benchmarks.md, ResNet-18: 2.29x quantize, 2.45x pass-through).
PEAK_MEMORY_PER_MODEL_BYTE = 2.5

_QUANTITY_SUFFIXES = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "m": 1e-3,
}


def parse_quantity(value):
    """Kubernetes resource quantity ("500m", "4Gi", 2) -> float."""
    text = str(value)
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", text)
    if not match or (match.group(2) and match.group(2) not in _QUANTITY_SUFFIXES):
        raise ValueError(f"not a resource quantity: {text!r}")
    return float(match.group(1)) * _QUANTITY_SUFFIXES.get(match.group(2), 1)


def parse_duration(text):
    """absl duration flag ("30s", "1m30s", "500ms") -> seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    parts = re.findall(r"([0-9.]+)(ms|us|ns|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


def quantd_flags(binary):
    """{flag: default} from `quantd --help` (absl's usage text)."""
    proc = subprocess.run([binary, "--help"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=30,
                          check=False)
    text = proc.stdout
    flags = {}
    # Each flag is "    --name (help, maybe over lines); default: VALUE;"
    # where the default may start on a line of its own.
    blocks = re.split(r"^\s+--(\w+) \(", text, flags=re.MULTILINE)
    for name, body in zip(blocks[1::2], blocks[2::2]):
        default = re.search(r"\);\s+default: (.*?);\s*$", body, re.MULTILINE)
        flags[name] = default.group(1).strip('"') if default else None
    if "port" not in flags or "shutdown_grace" not in flags:
        raise RuntimeError(f"cannot read the flags from `{binary} --help`:\n{text}")
    return flags


def load_path(path, errors):
    """Documents of a file, of stdin ("-") or of a kustomization directory."""
    if path == "-":
        return [d for d in yaml.safe_load_all(sys.stdin) if d]
    if not os.path.isdir(path):
        with open(path, encoding="utf-8") as f:
            return [d for d in yaml.safe_load_all(f) if d]
    kustomization = os.path.join(path, "kustomization.yaml")
    if not os.path.exists(kustomization):
        errors.append(f"{path}: no kustomization.yaml")
        return []
    with open(kustomization, encoding="utf-8") as f:
        kust = yaml.safe_load(f) or {}
    resources = kust.get("resources") or []
    present = sorted(n for n in os.listdir(path)
                     if n.endswith((".yaml", ".yml")) and n != "kustomization.yaml")
    for name in present:
        if name not in resources:
            errors.append(f"{path}/{name}: not listed in kustomization.yaml resources")
    docs = []
    for name in resources:
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            errors.append(f"kustomization.yaml lists {name}, which does not exist")
            continue
        with open(file, encoding="utf-8") as f:
            docs.extend(d for d in yaml.safe_load_all(f) if d)
    return docs


def selects(selector, labels):
    """Whether a non-empty label map selector matches `labels`."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check(docs, flags, dockerfile_text=None):
    """Returns the list of problems in `docs` (parsed manifests)."""
    errors = []
    by_kind = {}
    for doc in docs:
        kind = doc.get("kind")
        name = (doc.get("metadata") or {}).get("name")
        by_kind.setdefault(kind, []).append(doc)
        want = EXPECTED_API.get(kind)
        if want and doc.get("apiVersion") != want:
            errors.append(f"{kind}/{name}: apiVersion {doc.get('apiVersion')}, want {want}")
    for kind in EXPECTED_API:
        if len(by_kind.get(kind, [])) != 1:
            errors.append(f"want exactly one {kind}, found {len(by_kind.get(kind, []))}")
    if errors:
        return errors

    deployment = by_kind["Deployment"][0]
    service = by_kind["Service"][0]
    hpa = by_kind["HorizontalPodAutoscaler"][0]
    pdb = by_kind["PodDisruptionBudget"][0]
    dep_name = deployment["metadata"]["name"]
    spec = deployment.get("spec") or {}
    template = spec.get("template") or {}
    pod_meta = template.get("metadata") or {}
    pod_labels = pod_meta.get("labels") or {}
    pod = template.get("spec") or {}

    # --- selectors --------------------------------------------------------
    match_labels = (spec.get("selector") or {}).get("matchLabels")
    if not selects(match_labels, pod_labels):
        errors.append(f"Deployment selector {match_labels} does not match the pod labels {pod_labels}")
    if not selects((service.get("spec") or {}).get("selector"), pod_labels):
        errors.append("Service selector does not match the pod labels")
    if not selects(((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels"), pod_labels):
        errors.append("PodDisruptionBudget selector does not match the pod labels")
    for constraint in pod.get("topologySpreadConstraints") or []:
        if not selects((constraint.get("labelSelector") or {}).get("matchLabels"), pod_labels):
            errors.append(f"topologySpreadConstraint on {constraint.get('topologyKey')} "
                          "does not select the pods")
    if not pod.get("topologySpreadConstraints"):
        errors.append("no topologySpreadConstraints: replicas may share one node")

    # --- the container ----------------------------------------------------
    containers = pod.get("containers") or []
    quantd = next((c for c in containers if c.get("name") == "quantd"), None)
    if quantd is None:
        errors.append("no container named quantd")
        return errors
    ports = {p.get("name"): p.get("containerPort") for p in quantd.get("ports") or []}
    grpc_port = ports.get("grpc")
    metrics_port = ports.get("metrics")
    if grpc_port is None or metrics_port is None:
        errors.append(f"container ports must be named grpc and metrics, got {ports}")

    # Args: every flag exists; values agree with the ports.
    env_names = {e.get("name") for e in quantd.get("env") or []}
    args = {}
    for arg in quantd.get("args") or []:
        match = re.fullmatch(r"--(\w+)=(.*)", str(arg))
        if not match:
            errors.append(f"container arg {arg!r} is not --flag=value")
            continue
        flag, value = match.groups()
        if flag not in flags:
            errors.append(f"container arg --{flag}: quantd has no such flag")
        if flag in args:
            errors.append(f"container arg --{flag} given twice")
        args[flag] = value
        for var in re.findall(r"\$\((\w+)\)", value):
            if var not in env_names:
                errors.append(f"container arg --{flag} uses $({var}), which env does not define")
    if quantd.get("command"):
        errors.append("container sets command: the image's ENTRYPOINT is quantd, use args")

    def flag_value(flag):
        return args.get(flag, flags.get(flag))

    if str(flag_value("port")) != str(grpc_port):
        errors.append(f"quantd listens on --port={flag_value('port')}, grpc containerPort is {grpc_port}")
    if str(flag_value("metrics_port")) != str(metrics_port):
        errors.append(f"quantd metrics on --metrics_port={flag_value('metrics_port')}, "
                      f"metrics containerPort is {metrics_port}")

    # Prometheus scrape annotations point at the metrics port.
    annotations = pod_meta.get("annotations") or {}
    if annotations.get("prometheus.io/scrape") != "true":
        errors.append("pod template lacks prometheus.io/scrape: \"true\"")
    if str(annotations.get("prometheus.io/port")) != str(metrics_port):
        errors.append(f"prometheus.io/port {annotations.get('prometheus.io/port')} "
                      f"is not the metrics port {metrics_port}")
    if annotations.get("prometheus.io/path") != "/metrics":
        errors.append("prometheus.io/path is not /metrics")

    # Probes: gRPC health checks on the gRPC port.
    for probe_name in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = quantd.get(probe_name)
        if probe is None:
            errors.append(f"no {probe_name}")
            continue
        grpc = probe.get("grpc")
        if grpc is None:
            errors.append(f"{probe_name} is not a grpc probe")
        elif grpc.get("port") != grpc_port:
            errors.append(f"{probe_name} checks port {grpc.get('port')}, grpc port is {grpc_port}")
        elif grpc.get("service") not in (None, "", "quantd.v1.QuantizationService"):
            errors.append(f"{probe_name} asks for service {grpc.get('service')!r}, "
                          "which quantd's health service does not know")

    # Security.
    pod_sc = pod.get("securityContext") or {}
    sc = quantd.get("securityContext") or {}

    def effective(key):
        return sc.get(key, pod_sc.get(key))

    if effective("runAsNonRoot") is not True:
        errors.append("runAsNonRoot is not true")
    run_as_user = effective("runAsUser")
    if not isinstance(run_as_user, int) or run_as_user == 0:
        errors.append(f"runAsUser {run_as_user!r}: want a numeric non-root uid")
    if sc.get("readOnlyRootFilesystem") is not True:
        errors.append("readOnlyRootFilesystem is not true")
    if sc.get("allowPrivilegeEscalation") is not False:
        errors.append("allowPrivilegeEscalation is not false")
    if sc.get("privileged"):
        errors.append("container is privileged")
    if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
        errors.append("capabilities do not drop ALL")
    if ((sc.get("capabilities") or {}).get("add")):
        errors.append("capabilities add some back")
    seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
    if seccomp != "RuntimeDefault":
        errors.append(f"seccompProfile is {seccomp!r}, want RuntimeDefault")

    # Resources: requests and limits for CPU and memory, requests <= limits.
    resources = quantd.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    for res in ("cpu", "memory"):
        if res not in requests or res not in limits:
            errors.append(f"resources: {res} request and limit must both be set")
        elif parse_quantity(requests[res]) > parse_quantity(limits[res]):
            errors.append(f"resources: {res} request {requests[res]} over limit {limits[res]}")
    if "memory" in limits:
        jobs = int(flag_value("max_concurrent_jobs") or 0)
        model = int(flag_value("max_model_bytes"))
        # Models being uploaded or waiting in the job queue are charged to
        # the upload budget; running jobs peak at ~2.5x their model.
        uploads = int(flag_value("max_uploading_bytes"))
        if jobs <= 0:
            errors.append("--max_concurrent_jobs is not set: memory use is unbounded "
                          "relative to the limit")
        elif uploads <= 0:
            errors.append("--max_uploading_bytes=0: uploading and queued models are "
                          "unbounded relative to the limit")
        elif (jobs * model * PEAK_MEMORY_PER_MODEL_BYTE + uploads >
              parse_quantity(limits["memory"])):
            errors.append(f"{jobs} jobs x --max_model_bytes={model} x "
                          f"{PEAK_MEMORY_PER_MODEL_BYTE} + --max_uploading_bytes={uploads} "
                          f"exceeds the memory limit {limits['memory']}")

    # Termination: preStop sleep + drain must fit the grace period, and the
    # liveness probe must not kill a draining pod (it reads NOT_SERVING).
    grace = pod.get("terminationGracePeriodSeconds", 30)
    shutdown_grace = parse_duration(str(flag_value("shutdown_grace")))
    # After the grace, quantd waits up to --shutdown_force_after for the
    # cancelled jobs before it exits without them.
    force_after = parse_duration(str(flag_value("shutdown_force_after") or "0s"))
    pre_stop = 0.0
    exec_cmd = (((quantd.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command")
    if exec_cmd and exec_cmd[0] == "sleep":
        pre_stop = float(exec_cmd[1])
    sleep_action = (((quantd.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {})
    pre_stop += float(sleep_action.get("seconds", 0))
    if grace <= pre_stop + shutdown_grace + force_after:
        errors.append(f"terminationGracePeriodSeconds {grace} <= preStop {pre_stop}s + "
                      f"--shutdown_grace {shutdown_grace}s + --shutdown_force_after "
                      f"{force_after}s: running calls would be killed")
    liveness = quantd.get("livenessProbe") or {}
    liveness_window = liveness.get("periodSeconds", 10) * liveness.get("failureThreshold", 3)
    if liveness_window < grace:
        errors.append(f"livenessProbe gives up after {liveness_window}s, less than the "
                      f"{grace}s termination grace: a draining pod (NOT_SERVING) would be killed")

    # --- Service: headless, gRPC and metrics ports ------------------------
    svc_spec = service.get("spec") or {}
    if svc_spec.get("clusterIP") != "None":
        errors.append("Service is not headless (clusterIP: None): clients could not "
                      "balance across pods")
    if svc_spec.get("publishNotReadyAddresses"):
        errors.append("Service publishes not-ready (draining) pods")
    svc_ports = {p.get("name"): p for p in svc_spec.get("ports") or []}
    for name, container_port in (("grpc", grpc_port), ("metrics", metrics_port)):
        port = svc_ports.get(name)
        if port is None:
            errors.append(f"Service has no port named {name}")
        elif port.get("targetPort") not in (name, container_port):
            errors.append(f"Service port {name} targets {port.get('targetPort')}, "
                          f"not the container's {name} port")

    # --- HPA --------------------------------------------------------------
    hpa_spec = hpa.get("spec") or {}
    target = hpa_spec.get("scaleTargetRef") or {}
    if (target.get("kind"), target.get("name"), target.get("apiVersion")) != (
            "Deployment", dep_name, "apps/v1"):
        errors.append(f"HPA targets {target}, not Deployment {dep_name}")
    min_replicas = hpa_spec.get("minReplicas", 1)
    if min_replicas < 2:
        errors.append(f"HPA minReplicas {min_replicas}: a disruption would leave no replica")
    if hpa_spec.get("maxReplicas", 0) < min_replicas:
        errors.append("HPA maxReplicas below minReplicas")
    cpu_metric = [m for m in hpa_spec.get("metrics") or []
                  if m.get("type") == "Resource" and (m.get("resource") or {}).get("name") == "cpu"]
    if not cpu_metric:
        errors.append("HPA does not scale on CPU")
    elif "cpu" not in requests:
        errors.append("HPA CPU utilization needs a CPU request")

    # --- PDB --------------------------------------------------------------
    pdb_spec = pdb.get("spec") or {}
    if "minAvailable" not in pdb_spec and "maxUnavailable" not in pdb_spec:
        errors.append("PodDisruptionBudget sets neither minAvailable nor maxUnavailable")
    if pdb_spec.get("maxUnavailable") is not None and int(str(pdb_spec["maxUnavailable"]).rstrip("%")) < 1:
        errors.append("PodDisruptionBudget maxUnavailable < 1 blocks every node drain")
    if isinstance(pdb_spec.get("minAvailable"), int) and pdb_spec["minAvailable"] >= min_replicas:
        errors.append("PodDisruptionBudget minAvailable >= HPA minReplicas blocks every node drain")

    # --- Dockerfile agrees with the pod -----------------------------------
    if dockerfile_text is not None:
        runtime = dockerfile_text.split("AS runtime", 1)[-1]
        user = re.findall(r"^USER\s+(\d+)", runtime, re.MULTILINE)
        if not user or int(user[-1]) != run_as_user:
            errors.append(f"Dockerfile USER {user} is not runAsUser {run_as_user}")
        exposed = {int(p) for line in re.findall(r"^EXPOSE\s+(.*)$", runtime, re.MULTILINE)
                   for p in line.split()}
        for port in (grpc_port, metrics_port):
            if port not in exposed:
                errors.append(f"Dockerfile does not EXPOSE {port}")
        if not re.search(r'^ENTRYPOINT\s+\["quantd"\]', runtime, re.MULTILINE):
            errors.append("Dockerfile ENTRYPOINT is not [\"quantd\"]: container args would not be quantd flags")

    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quantd", required=True, help="the built quantd binary")
    parser.add_argument("--dockerfile", help="Dockerfile to cross-check")
    parser.add_argument("paths", nargs="+")
    opts = parser.parse_args()

    flags = quantd_flags(opts.quantd)
    dockerfile_text = None
    if opts.dockerfile:
        with open(opts.dockerfile, encoding="utf-8") as f:
            dockerfile_text = f.read()
    failed = False
    for path in opts.paths:
        errors = []
        docs = load_path(path, errors)
        errors += check(docs, flags, dockerfile_text)
        for error in errors:
            print(f"{path}: {error}")
        kinds = sorted({d.get("kind") for d in docs})
        print(f"{path}: {len(docs)} objects ({', '.join(map(str, kinds))}), "
              f"{len(flags)} quantd flags known, {len(errors)} problem(s)")
        failed |= bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
