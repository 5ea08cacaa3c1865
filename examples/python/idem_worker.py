#!/usr/bin/env python3
"""An idem worker in Python, standard library only: the worker protocol of `idem serve`.

    IDEM_TOKEN=... python3 idem_worker.py --url http://127.0.0.1:8080 --kinds count,charge

It claims jobs (POST /v1/claims), runs each job's handler in a thread of a pool while a
second thread heartbeats the job's lease every lease/3, then completes or fails the job.
It prints `started <id>` and `completed <id>` on stdout, everything else on stderr.

The fence rule. Each claim gives the job a new `fence`, a number that only grows, and
every write about the job (heartbeat, complete, fail, intent begin) carries it. When a
worker dies or stalls past its lease, the server's rescuer puts the job back, and the
next claim raises the fence: from then on, every write under the old fence is refused
with 409 `urn:idem:problem:lease_lost` and changes nothing. A worker that gets
`lease_lost` stops and does nothing more for that job: another claim owns it now. So a
job may *run* more than once (at least once), but only one claim's completion is ever
recorded, and a call to another service made through an intent (kind `charge`) carries
one key across all of the job's attempts, which a keyed remote applies once.
"""

import argparse, json, os, signal, socket, sys, threading, time, urllib.error, urllib.request
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

IDLE_SLEEP = 0.5  # seconds between claims when no job waits
CALL_TIMEOUT = 10  # seconds a `charge` call may take
INTENT_LEASE_MS = 30_000  # an intent's lease: longer than the call's timeout (one try)


class LeaseLost(Exception):
    """409 lease_lost or intent_lost: the claim is stale; do nothing more for the job."""


class Permanent(Exception):
    """A failure that a retry cannot fix: the job goes straight to `dead`."""


class AwaitsIntent(Permanent):
    """The intent's outcome is unknown: the job is dead until reconciliation (or an
    operator: POST /v1/intents/{key}/resolve) settles the intent and retries the job."""

    def __init__(self, key):
        super().__init__(f"the outcome of intent {key} is unknown; reconciliation decides")
        self.key = key


OUTPUT = threading.Lock()  # one whole line at a time from the pool's threads


def say(line, stream=sys.stdout):
    with OUTPUT:
        print(line, file=stream, flush=True)


def log(message):
    say(f"idem_worker: {message}", sys.stderr)


class Api:
    def __init__(self, url, token):
        self.url, self.token = url.rstrip("/"), token

    def call(self, method, path, body=None, key=None):
        """(status, JSON answer). A request with an Idempotency-Key is repeated when the
        connection fails or the server asks to: the key makes the repeat safe."""
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if key:
            headers["Idempotency-Key"] = key
        data = None if body is None else json.dumps(body).encode()
        tries = 5 if key else 1
        for attempt in range(tries):
            request = urllib.request.Request(self.url + path, data, headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    return answer.status, json.loads(answer.read() or b"null")
            except urllib.error.HTTPError as e:
                status, problem = e.code, parse(e.read())
                again = status == 503 or problem.get("type", "").endswith("key_in_flight")
                if not again or attempt == tries - 1:
                    return status, problem
            except OSError:  # no answer at all (URLError is an OSError)
                if attempt == tries - 1:
                    raise
            time.sleep(0.2 * 2**attempt)

    def post(self, path, body, key=None):
        """The answer of a POST that must succeed; LeaseLost when the fence is stale."""
        status, answer = self.call("POST", path, body, key)
        if status == 409 and answer.get("type", "").endswith(("lease_lost", "intent_lost")):
            raise LeaseLost(answer.get("detail"))
        if status >= 400:
            raise RuntimeError(f"POST {path}: {status} {answer.get('detail', answer)}")
        return answer


def parse(raw):
    try:
        return json.loads(raw)
    except ValueError:
        return {"detail": raw.decode(errors="replace")}


class Job:
    """A claimed job: its record, and its heartbeat while the handler runs."""

    def __init__(self, api, record, lease_ms):
        self.api, self.record, self.lease_ms = api, record, lease_ms
        self.id, self.fence, self.args = record["id"], record["fence"], record["args"]
        self.lost = threading.Event()  # a heartbeat was refused: the claim is stale
        self.done = threading.Event()

    def heartbeat(self):
        while not self.done.wait(self.lease_ms / 3000):
            try:
                body = {"fence": self.fence, "lease_ms": self.lease_ms}
                self.api.post(f"/v1/jobs/{self.id}/heartbeat", body)
            except LeaseLost:
                self.lost.set()
                return
            except Exception as e:  # the next beat may still get through in time
                log(f"job {self.id}: heartbeat failed: {e}")

    def check(self):
        """Raises LeaseLost once a heartbeat was refused; long handlers call it often."""
        if self.lost.is_set():
            raise LeaseLost(f"job {self.id}: a heartbeat was refused")


def count(job):
    """Demo kind: does nothing, after sleeping `sleep_ms` (only on the first
    `sleep_attempts` attempts when given: a job that hangs the first time)."""
    attempt = job.record["attempt"]
    if attempt <= job.args.get("sleep_attempts", attempt):
        deadline = time.monotonic() + job.args.get("sleep_ms", 0) / 1000
        while time.monotonic() < deadline:
            job.check()
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


def charge(job):
    """POSTs {"amount"} to args["url"] through an intent: reserve the call, send it with
    the intent's key as its Idempotency-Key, record how it ended."""
    key = f"charge:job:{job.id}"  # the same on every attempt of the job
    keyed = job.args.get("keyed", True)  # does the remote honour Idempotency-Key?
    request = {"url": job.args["url"], "amount": job.args["amount"]}
    path = f"/v1/intents/{key}"
    begin = {"job_id": job.id, "fence": job.fence, "request": request,
             "unkeyed": not keyed, "lease_ms": INTENT_LEASE_MS}
    begun = job.api.post(path + "/begin", begin)
    outcome, intent = begun["outcome"], begun["intent"]
    if outcome == "completed":  # an earlier attempt's call was applied
        return
    if outcome == "failed":
        raise Permanent(f"the remote refused {key}: {intent['error']}")
    if outcome == "reconcile":
        raise AwaitsIntent(key)
    if outcome == "in_progress":
        raise RuntimeError(f"{key} is held by another attempt until {intent['lease_expires_at']}")
    fence = intent["fence"]  # begun: the intent's own fence, for its writes
    job.check()
    job.api.post(path + "/renew", {"fence": fence, "lease_ms": INTENT_LEASE_MS})  # still ours?
    status, result = send(request["url"], {"amount": request["amount"]}, key)
    if status is not None and 200 <= status < 300:
        job.api.post(path + "/complete", {"fence": fence, "result": result})
        return
    if status == 0 or status in (408, 409, 425, 429):  # certainly not applied
        job.api.post(path + "/release", {"fence": fence})
        raise RuntimeError(f"{key}: not applied ({f'HTTP {status}' if status else 'no connection'})")
    if status is not None and status < 500:  # refused for good
        job.api.post(path + "/fail", {"fence": fence, "error": f"HTTP {status}"})
        raise Permanent(f"{key}: the remote answered {status}")
    what = f"HTTP {status}" if status else "no answer (timeout or reset)"  # maybe applied
    if keyed:  # the remote applies the key once, so sending it again is safe
        job.api.post(path + "/release", {"fence": fence})
        raise RuntimeError(f"{key}: {what}; a retry sends it again under the same key")
    job.api.post(path + "/unknown", {"fence": fence, "error": what})
    raise AwaitsIntent(key)


def send(url, body, key):
    """(status, JSON answer); status 0 when the request certainly never left (no
    connection), None when it may have been applied (timeout, reset)."""
    headers = {"Content-Type": "application/json", "Idempotency-Key": key}
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT) as answer:
            return answer.status, parse(answer.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None
    except urllib.error.URLError as e:
        never_left = isinstance(e.reason, (ConnectionRefusedError, socket.gaierror))
        return (0 if never_left else None), None
    except OSError:
        return None, None


HANDLERS = {"count": count, "charge": charge}


def run(api, record, lease_ms):
    job = Job(api, record, lease_ms)
    threading.Thread(target=job.heartbeat, daemon=True).start()
    say(f"started {job.id}")
    try:
        try:
            HANDLERS[record["kind"]](job)
            job.check()
            finish, body = "complete", {"fence": job.fence}
        except LeaseLost:
            raise
        except Exception as e:
            failure = "permanent" if isinstance(e, Permanent) else "retry"
            finish = "fail"
            body = {"fence": job.fence, "error": f"{type(e).__name__}: {e}", "outcome": failure}
            if isinstance(e, AwaitsIntent):
                body["awaits_intent"] = e.key
        # The key lets a repeat after a lost answer get the first answer back.
        api.post(f"/v1/jobs/{job.id}/{finish}", body, key=f"{finish}:{job.id}:{job.fence}")
        if finish == "complete":
            say(f"completed {job.id}")
        else:
            log(f"job {job.id} failed ({body['outcome']}): {body['error']}")
    except LeaseLost as e:
        log(f"job {job.id}: the claim is stale, leaving the job to its new owner ({e})")
    except Exception as e:
        log(f"job {job.id}: its outcome was not recorded ({e}); it runs again after its lease")
    finally:
        job.done.set()  # the heartbeat stops


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default=os.environ.get("IDEM_URL", "http://127.0.0.1:8080"))
    p.add_argument("--token", default=os.environ.get("IDEM_TOKEN"), help="or env IDEM_TOKEN")
    p.add_argument("--queue", default="default")
    p.add_argument("--kinds", default="count,charge", help="comma-separated")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--lease-ms", type=int, default=30_000)
    p.add_argument("--name", default=f"py-{socket.gethostname()}-{os.getpid()}")
    p.add_argument("--exit-when-idle", type=int, default=0, metavar="N",
                   help="exit after N empty claims in a row (0: never)")
    a = p.parse_args()
    kinds = a.kinds.split(",")
    if unknown := set(kinds) - HANDLERS.keys():
        p.error(f"no handler for {sorted(unknown)}; this worker has {sorted(HANDLERS)}")
    api, stopping = Api(a.url, a.token), threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stopping.set())
    log(f"{a.name} claims {kinds} on queue {a.queue} at {a.url}")
    pool, running, idle, code = ThreadPoolExecutor(a.concurrency), set(), 0, 0
    while not stopping.is_set():
        running = {f for f in running if not f.done()}
        free = a.concurrency - len(running)
        if free == 0:
            wait(running, timeout=1, return_when=FIRST_COMPLETED)
            continue
        claim = {"queue": a.queue, "kinds": kinds, "limit": free,
                 "lease_ms": a.lease_ms, "worker": a.name}
        try:
            status, answer = api.call("POST", "/v1/claims", claim)
        except OSError as e:
            status, answer = 0, {"detail": str(e)}
        if status in (400, 401, 403, 404, 422):  # a configuration error: retrying cannot help
            log(f"claim refused ({status}): {answer.get('detail')}")
            code = 2
            break
        jobs = answer.get("jobs", []) if status == 200 else []
        if status != 200:
            log(f"claim failed ({status}): {answer.get('detail')}")
        for record in jobs:
            running.add(pool.submit(run, api, record, a.lease_ms))
        idle = 0 if jobs else idle + 1
        if a.exit_when_idle and idle >= a.exit_when_idle:
            break
        if not jobs:
            stopping.wait(IDLE_SLEEP)
    pool.shutdown(wait=True)  # jobs under way finish; their heartbeats hold their leases
    sys.exit(code)


if __name__ == "__main__":
    main()
