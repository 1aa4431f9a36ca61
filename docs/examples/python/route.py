"""A Sluice client in Python: routing, plain-record produce and fetch, errors.

Generate the stubs first (docs/api.md, "Generating a client"), then:
    python3 route.py 127.0.0.1:9090 demo
"""
import sys
import time

import grpc

from rpc import status_pb2
from sluice.controller.v1 import messages_pb2 as ctl, service_pb2_grpc as ctl_grpc
from sluice.common.v1 import messages_pb2 as common
from sluice.errordetails.v1 import messages_pb2 as ed
from sluice.metadata.v1 import messages_pb2 as meta, service_pb2_grpc as meta_grpc
from sluice.storage.v1 import messages_pb2 as st, service_pb2_grpc as st_grpc


def error_details(err):
    """Decode the ErrorInfo and BadRequest of a failed call from its trailer."""
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for any_ in status.details:
                for cls in (ed.ErrorInfo, ed.BadRequest, ed.LeaderHint, ed.ControllerHint):
                    if any_.Is(cls.DESCRIPTOR):
                        msg = cls()
                        any_.Unpack(msg)
                        yield msg


def leader_address(bootstrap, topic, partition):
    """Ask any node where the partition's leader is (GetMetadata)."""
    with grpc.insecure_channel(bootstrap) as ch:
        md = meta_grpc.MetadataServiceStub(ch).GetMetadata(meta.GetMetadataRequest(topics=[topic]))
    t = md.topics[0]
    if t.error.code:
        raise SystemExit(f"{topic}: {ed.ErrorCode.Name(t.error.code)}: {t.error.message}")
    leader = next(p.leader_id for p in t.partitions if p.partition == partition)
    broker = next(b for b in md.brokers if b.id == leader)
    ep = next(e for e in broker.endpoints if e.name == "grpc")
    return f"{ep.host}:{ep.port}"


def main(bootstrap, topic):
    with grpc.insecure_channel(bootstrap) as ch:
        # Admin calls go to any node; a standby controller forwards nothing but
        # answers NOT_CONTROLLER with a ControllerHint naming the active one.
        res = ctl_grpc.ControllerServiceStub(ch).CreateTopics(ctl.CreateTopicsRequest(
            topics=[ctl.TopicSpec(name=topic, num_partitions=1, replication_factor=1)]))
        err = res.results[0].error
        if err.code and err.code != ed.ERROR_CODE_TOPIC_ALREADY_EXISTS:
            raise SystemExit(f"create {topic}: {ed.ErrorCode.Name(err.code)}: {err.message}")

    # Produce and fetch go to the partition's leader. The outcome of each
    # partition comes inside an OK call: retry the retriable ones with a
    # backoff (a new topic's leader may not know yet that it leads), at the
    # address of the LeaderHint when there is one, else after new metadata.
    addr = leader_address(bootstrap, topic, 0)
    records = common.Records(records=[common.Record(key=b"k%d" % i, value=b"v%d" % i) for i in range(3)])
    for attempt in range(50):
        with grpc.insecure_channel(addr) as ch:
            resp = st_grpc.StorageServiceStub(ch).Produce(st.ProduceRequest(acks=st.ACKS_ALL, timeout_ms=10000, partitions=[
                st.ProducePartition(topic=topic, partition=0, records=records)]))
        r = resp.results[0]
        if not r.error.code:
            break
        if not r.error.retriable or attempt == 49:
            raise SystemExit(f"produce: {ed.ErrorCode.Name(r.error.code)}: {r.error.message}")
        time.sleep(0.1)
        addr = r.error.leader.leader_address if r.error.HasField("leader") and r.error.leader.leader_address else leader_address(bootstrap, topic, 0)
    print(f"produced 3 records at offset {r.base_offset}")

    with grpc.insecure_channel(addr) as ch:
        storage = st_grpc.StorageServiceStub(ch)

        for chunk in storage.Fetch(st.FetchRequest(format=st.RECORD_FORMAT_RECORDS, max_wait_ms=100, partitions=[
                st.FetchPartition(topic=topic, partition=0, fetch_offset=r.base_offset)])):
            for rec in chunk.records.records:
                print(f"offset {rec.offset}: {rec.key.decode()}={rec.value.decode()}")
            break

        # A malformed request fails as a whole: the gRPC status says what to
        # fix, and its details carry ErrorInfo and the offending fields.
        try:
            storage.ListOffsets(st.ListOffsetsRequest(partitions=[st.ListOffsetsPartition(topic=topic, partition=-1)]))
        except grpc.RpcError as e:
            print(f"ListOffsets: {e.code().name}")
            for d in error_details(e):
                if isinstance(d, ed.ErrorInfo):
                    print(f"  ErrorInfo: {ed.ErrorCode.Name(d.code)} retriable={d.retriable}")
                elif isinstance(d, ed.BadRequest):
                    for v in d.field_violations:
                        print(f"  field {v.field}: {v.description}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
