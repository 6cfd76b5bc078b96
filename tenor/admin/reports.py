"""What the admin tells about its cell (List, Stats, the status page), as protos."""

from __future__ import annotations

import time

from tenor.admin.assigner import ReplicaStatus
from tenor.admin.manager import Manager, ModelRecord
from tenor.admin.model_specs import Placement
from tenor.admin.naming import ModelName, parse_name
from tenor.admin.store import ModelSpec
from tenor.errors import UserError
from tenor.proto import admin_pb2, common_pb2

_TO_PROTO = {
    ReplicaStatus.LOADING: common_pb2.LOADING,
    ReplicaStatus.LOADED: common_pb2.LOADED,
    ReplicaStatus.FAILED: common_pb2.FAILED,
    ReplicaStatus.UNLOADING: common_pb2.UNLOADING,
}


def spec_to_proto(spec: ModelSpec) -> admin_pb2.Model:
    return admin_pb2.Model(
        model_name=spec.name,
        config_name=spec.config_name,
        checkpoint=spec.checkpoint or "",
        requested_replicas=spec.replicas,
        overrides=spec.overrides_map,
        uuid=spec.uuid,
    )


def spec_from_proto(model: admin_pb2.Model) -> ModelSpec:
    try:
        return ModelSpec.make(
            model.model_name,
            model.config_name,
            model.checkpoint or None,
            model.requested_replicas,
            dict(model.overrides),
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _published(manager: Manager, record: ModelRecord) -> admin_pb2.PublishedModel:
    name = record.spec.name
    replicas = [
        admin_pb2.Replica(
            address=address,
            status=_TO_PROTO[server.replicas[name].status],
            failure_reason=server.replicas[name].failure_reason,
            role=server.replicas[name].role,
        )
        for address, server in sorted(manager.servers.items())
        if name in server.replicas
    ]
    return admin_pb2.PublishedModel(
        model=spec_to_proto(record.spec),
        addresses=manager.addresses_of(name),
        replicas=replicas,
        failure_reason=record.last_failure,
        gave_up=record.gave_up(manager.options.max_load_attempts),
        shortfall=record.shortfall,
    )


def list_models(manager: Manager, name: str) -> admin_pb2.ListResponse:
    """`name`: "" or the cell for every model, or one model's name (NotFoundError if absent)."""
    if not name:
        wanted = sorted(manager.models)
    else:
        parsed = parse_name(name)
        cell = parsed.cell_name if isinstance(parsed, ModelName) else parsed
        if cell != manager.cell:
            raise UserError(f"{name} is not in this admin's cell {manager.cell}")
        wanted = [str(parsed)] if isinstance(parsed, ModelName) else sorted(manager.models)
        if isinstance(parsed, ModelName):
            manager.get(str(parsed))
    return admin_pb2.ListResponse(models=[_published(manager, manager.models[n]) for n in wanted])


def _placement(manager: Manager, name: str) -> Placement | None:
    record = manager.models.get(name)
    return record.placement if record is not None else None


def stats(manager: Manager) -> admin_pb2.StatsResponse:
    now = time.monotonic()
    servers = []
    for address, server in sorted(manager.servers.items()):
        used = sum(
            p.memory_bytes
            for n, r in server.replicas.items()
            if r.status != ReplicaStatus.FAILED and (p := _placement(manager, n)) is not None
        )
        models = [
            admin_pb2.ModelOnServer(
                model_name=n,
                status=_TO_PROTO[r.status],
                failure_reason=r.failure_reason,
                queue_depth=r.queue_depth,
                running=r.running,
                latency_p50_ms=r.latency_ms[0],
                latency_p95_ms=r.latency_ms[1],
                latency_p99_ms=r.latency_ms[2],
            )
            for n, r in sorted(server.replicas.items())
        ]
        servers.append(
            admin_pb2.ServerInfo(
                address=address,
                http_address=server.http_address,
                spec=common_pb2.ServerSpec(
                    platform=server.spec.platform,
                    memory_bytes=server.spec.memory_bytes,
                    tags=sorted(server.spec.tags),
                    servable_configs=sorted(server.spec.servable_configs),
                    group_size=server.spec.group_size,
                ),
                healthy=server.healthy,
                last_seen_age_s=now - server.last_ok,
                memory_used_bytes=used,
                queue_depth=sum(r.queue_depth for r in server.replicas.values()),
                models=models,
            )
        )
    return admin_pb2.StatsResponse(admin_id=manager.admin_id, cell=str(manager.cell), servers=servers)
