#!/bin/sh
# drydock's namespace (with its retention of closed workflows) and search
# attributes, the ones `drydock up` registers on the dev server. Idempotent:
# an existing namespace is kept, and re-adding an attribute is a no-op.
set -eu
addr="--address $TEMPORAL_ADDRESS"
ns="$TEMPORAL_NAMESPACE"
for i in $(seq 1 30); do temporal operator cluster health $addr >/dev/null 2>&1 && break; sleep 2; done
temporal operator namespace describe $addr -n "$ns" >/dev/null 2>&1 \
  || temporal operator namespace create $addr -n "$ns" --retention "$TEMPORAL_RETENTION"
# A new namespace reaches the server's namespace cache within seconds, and new
# search attributes the frontend's cache later still: retry until a list query
# on both answers (before that, serve's queries of them fail).
for i in $(seq 1 60); do
  temporal operator search-attribute create $addr -n "$ns" \
    --name DrydockPhase --type Keyword --name DrydockRepo --type Keyword >/dev/null 2>&1 || true
  if temporal workflow list $addr -n "$ns" --limit 1 --query "DrydockPhase = 'x' and DrydockRepo = 'y'" >/dev/null 2>&1; then
    echo "temporal-setup: namespace $ns ready"
    exit 0
  fi
  sleep 2
done
echo "temporal-setup: the search attributes of $ns did not become usable" >&2
exit 1
