"""ray.io/v1 fields present in KubeRay v1.3, v1.4 and v1.5 (the GKE Ray operator add-on versions).

Feature-gated fields (RayJob deletionStrategy) are left out on purpose: they are off on GKE.
Pod templates are checked apart, against the core Kubernetes schema.
"""

RAYCLUSTER_SPEC = {
    "rayVersion",
    "headGroupSpec",
    "workerGroupSpecs",
    "enableInTreeAutoscaling",
    "autoscalerOptions",
    "headServiceAnnotations",
    "suspend",
    "managedBy",
    "gcsFaultToleranceOptions",
}
HEAD_GROUP = {"rayStartParams", "template", "serviceType", "headService", "enableIngress"}
WORKER_GROUP = {
    "groupName",
    "replicas",
    "minReplicas",
    "maxReplicas",
    "rayStartParams",
    "template",
    "scaleStrategy",
    "numOfHosts",
    "suspend",
    "idleTimeoutSeconds",
}
RAYJOB_SPEC = {
    "entrypoint",
    "runtimeEnvYAML",
    "jobId",
    "shutdownAfterJobFinishes",
    "ttlSecondsAfterFinished",
    "activeDeadlineSeconds",
    "rayClusterSpec",
    "clusterSelector",
    "submitterPodTemplate",
    "submitterConfig",
    "suspend",
    "entrypointNumCpus",
    "entrypointNumGpus",
    "entrypointResources",
    "submissionMode",
    "backoffLimit",
    "managedBy",
}
# With clusterSelector KubeRay rejects these (and ignores rayClusterSpec).
RAYJOB_FORBIDDEN_WITH_SELECTOR = {"suspend", "backoffLimit", "rayClusterSpec"}
RAYJOB_NAME_MAX = 47


def unknown_fields(obj: dict) -> list[str]:
    """Paths of fields in a RayCluster or RayJob that these KubeRay versions do not know."""
    spec = obj["spec"]
    if obj["kind"] == "RayCluster":
        bad = [f"spec.{k}" for k in spec if k not in RAYCLUSTER_SPEC]
        bad += [f"spec.headGroupSpec.{k}" for k in spec["headGroupSpec"] if k not in HEAD_GROUP]
        for i, group in enumerate(spec.get("workerGroupSpecs", [])):
            bad += [f"spec.workerGroupSpecs[{i}].{k}" for k in group if k not in WORKER_GROUP]
        return bad
    bad = [f"spec.{k}" for k in spec if k not in RAYJOB_SPEC]
    if "clusterSelector" in spec:
        bad += [f"spec.{k} (with clusterSelector)" for k in spec if k in RAYJOB_FORBIDDEN_WITH_SELECTOR]
    if len(obj["metadata"]["name"]) > RAYJOB_NAME_MAX:
        bad.append("metadata.name (longer than 47)")
    return bad


def pod_templates(obj: dict) -> list[dict]:
    spec = obj["spec"]
    groups = [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]
    return [group["template"] for group in groups]
