"""LeaderWorkerSet's API (leaderworkerset.x-k8s.io/v1) as a JSON schema of its own fields,
written from kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go (the
LeaderWorkerSetSpec, LeaderWorkerTemplate, RolloutStrategy, SubGroupPolicy and
NetworkConfig types and their kubebuilder enums). The pod templates inside are core
PodTemplateSpecs; the tests check them with kubernetes-validate's offline schemas."""

from __future__ import annotations

_INT_OR_STRING = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
_POSITIVE = {"type": "integer", "minimum": 1}

LEADER_WORKER_TEMPLATE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["workerTemplate"],
    "properties": {
        "leaderTemplate": {"type": "object"},
        "workerTemplate": {"type": "object"},
        "size": _POSITIVE,
        "restartPolicy": {"enum": ["Default", "RecreateGroupOnPodRestart", "RecreateGroupAfterStart", "None"]},
        "subGroupPolicy": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "subGroupPolicyType": {"enum": ["LeaderWorker", "LeaderExcluded"]},
                "subGroupSize": _POSITIVE,
            },
        },
        "volumeClaimTemplates": {"type": "array", "items": {"type": "object"}},
        "persistentVolumeClaimRetentionPolicy": {"type": "object"},
    },
}

LEADER_WORKER_SET = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "leaderworkerset.x-k8s.io/v1"},
        "kind": {"const": "LeaderWorkerSet"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["leaderWorkerTemplate"],
            "properties": {
                "replicas": {"type": "integer", "minimum": 0},
                "leaderWorkerTemplate": LEADER_WORKER_TEMPLATE,
                "rolloutStrategy": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["type"],
                    "properties": {
                        "type": {"enum": ["RollingUpdate"]},
                        "rollingUpdateConfiguration": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "partition": {"type": "integer", "minimum": 0},
                                "maxUnavailable": _INT_OR_STRING,
                                "maxSurge": _INT_OR_STRING,
                            },
                        },
                    },
                },
                "startupPolicy": {"enum": ["LeaderCreated", "LeaderReady"]},
                "networkConfig": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"subdomainPolicy": {"enum": ["Shared", "UniquePerReplica"]}},
                },
            },
        },
    },
}
