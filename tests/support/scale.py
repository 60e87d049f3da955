"""Helpers of the indexer's scale tests: many small photos, S3 and SQS in moto with a count of the
requests it served, Triton's inference count, and a watch on the broker's queue length."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

from core.settings import S3Settings
from harness.photos import small_photo
from harness.processes import free_ports

CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def many_photos(root: Path, count: int, per_folder: int = 500) -> list[str]:
    """count small photos in folders of per_folder; returns their keys."""
    keys = []
    for i in range(count):
        key = f"f{i // per_folder:03d}/p{i:06d}.jpg"
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(small_photo(i))
        keys.append(key)
    return keys


def image_inferences(triton_url: str) -> int:
    """Images Triton's image model has embedded so far (every version)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(triton_url)
    try:
        stats = client.get_inference_statistics("clip_image")
    finally:
        client.close()
    return sum(int(model.inference_count) for model in stats.model_stats)


class CountingMotoServer(ThreadedMotoServer):
    """moto's server (S3, SQS...) counting the S3 requests it serves by operation."""

    def __init__(self, port: int) -> None:
        super().__init__(ip_address="127.0.0.1", port=port, verbose=False)
        self.requests: Counter[str] = Counter()

    def _server_entry(self) -> None:
        backend = DomainDispatcherApplication(create_backend_app)

        def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            query = parse_qs(environ.get("QUERY_STRING", ""))
            if "list-type" in query:
                self.requests["ListObjectsV2"] += 1
            elif environ["REQUEST_METHOD"] == "HEAD":
                self.requests["HeadObject"] += 1
            return backend(environ, start_response)  # type: ignore[no-any-return]

        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()


@dataclass
class Moto:
    """S3 and SQS of one moto server, and the settings that reach them."""

    server: CountingMotoServer
    endpoint: str
    settings: S3Settings

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(
            service, endpoint_url=self.endpoint, region_name="us-east-1", **CREDENTIALS
        )

    def bucket_with_events(self, bucket: str, queue: str) -> str:
        """A bucket whose object events go to a new SQS queue; returns the queue's URL."""
        s3, sqs = self.client("s3"), self.client("sqs")
        s3.create_bucket(Bucket=bucket)
        url: str = sqs.create_queue(QueueName=queue)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        events = ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]
        s3.put_bucket_notification_configuration(
            Bucket=bucket,
            NotificationConfiguration={
                "QueueConfigurations": [
                    {"QueueArn": arn["Attributes"]["QueueArn"], "Events": events}
                ]
            },
        )
        return url

    def queued(self, queue_url: str) -> list[Any]:
        """moto's own list of a queue's messages (each with its `body` and `sent_timestamp`,
        ms), in the order it delivers them. A standard queue keeps no order: a test reorders
        the list, and sets the times the messages were sent, as SQS's many hosts may deliver
        them. The server runs in this process, so the list is the one it serves."""
        from moto.sqs.models import sqs_backends

        account, name = queue_url.rstrip("/").split("/")[-2:]
        messages: list[Any] = sqs_backends[account]["us-east-1"].queues[name]._messages
        return messages


@contextmanager
def moto_server() -> Iterator[Moto]:
    (port,) = free_ports(1)
    server = CountingMotoServer(port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # moto keeps its buckets and queues in this process, not in the server: each server starts
    # empty, so one test's leftovers (same bucket, same queue) are not the next one's.
    httpx.post(f"{endpoint}/moto-api/reset", timeout=30).raise_for_status()
    settings = S3Settings(
        endpoint_url=endpoint,
        access_key_id=CREDENTIALS["aws_access_key_id"],
        secret_access_key=CREDENTIALS["aws_secret_access_key"],
        region="us-east-1",
    )
    try:
        yield Moto(server, endpoint, settings)
    finally:
        server.stop()
