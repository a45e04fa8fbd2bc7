"""Creates the shop database and the containers of the order fulfilment
workflow in a Cosmos DB account (the emulator of docker-compose.yml).

sagafeed creates its own lease and parking containers; the containers its
workflows read and write must exist first. Same layout as `sagafeed demo`
(demo/demo.c). Waits for the emulator, which takes a while to start.

Environment: COSMOS_ENDPOINT, COSMOS_KEY, COSMOS_DATABASE (default shop),
COSMOS_VERIFY_TLS (default false: the emulator's self-signed certificate).
"""
import os
import sys
import time

CONTAINERS = [
    ("orders", "/customerId"),
    ("products", "/category"),
    ("customers", "/customerId"),
    ("shipments", "/orderId"),
]


def main():
    from azure.cosmos import CosmosClient, PartitionKey

    endpoint = os.environ["COSMOS_ENDPOINT"]
    key = os.environ["COSMOS_KEY"]
    database = os.environ.get("COSMOS_DATABASE", "shop")
    verify = os.environ.get("COSMOS_VERIFY_TLS", "false").lower() == "true"
    deadline = time.monotonic() + 600
    while True:
        try:
            client = CosmosClient(endpoint, credential=key, connection_verify=verify)
            db = client.create_database_if_not_exists(database)
            break
        except Exception as e:  # the emulator is still starting
            if time.monotonic() > deadline:
                print(f"cosmos-init: giving up: {e}", file=sys.stderr)
                return 1
            print(f"cosmos-init: waiting for {endpoint}: {e}", file=sys.stderr)
            time.sleep(5)
    for name, pk in CONTAINERS:
        # TTL on without a default: markers and outbox records carry their own ttl.
        db.create_container_if_not_exists(id=name, partition_key=PartitionKey(path=pk),
                                          default_ttl=-1)
        print(f"cosmos-init: {database}/{name} ({pk}) ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
