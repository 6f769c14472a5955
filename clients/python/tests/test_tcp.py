"""The client over TCP with bearer tokens, and the errors of auth and
capacity, against a real `cordon serve --listen` (see conftest.py)."""

from __future__ import annotations

from typing import Iterator

import pytest

from cordon_client import Client, Forbidden, NotFound, RateLimited, Sandbox, Unauthorized

from conftest import Server, running_server

MAX_SANDBOXES = 2


@pytest.fixture(scope="module")
def tcp_server() -> Iterator[Server]:
    tokens = [["--name", "alice", "--preset", "low"], ["--name", "bob", "--preset", "low", "--max-sandboxes", "1"]]
    with running_server("--listen", "127.0.0.1:0", "--max-sandboxes", str(MAX_SANDBOXES), tokens=tokens) as srv:
        assert srv.url, "the server printed no TCP address"
        yield srv


def test_tcp_without_a_valid_token_is_unauthorized(tcp_server: Server) -> None:
    with pytest.raises(Unauthorized) as err:
        Sandbox.list(base_url=tcp_server.url)
    assert err.value.status == 401 and err.value.fix
    with pytest.raises(Unauthorized):
        Sandbox.create(preset="low", base_url=tcp_server.url, token="cordon_" + "0" * 64)


def test_a_token_sees_only_its_own_sandboxes(tcp_server: Server) -> None:
    url = tcp_server.url
    with Client(url, token=tcp_server.tokens["alice"]) as alice, Client(url, token=tcp_server.tokens["bob"]) as bob:
        with Sandbox.create(preset="low", client=alice) as sb:
            assert sb.info().owner == "alice"
            assert sb.exec(["echo", "over tcp"]).stdout == "over tcp\n"
            assert sb.id in [s.id for s in alice.sandboxes()]
            # another token's sandbox does not exist for bob
            assert sb.id not in [s.id for s in bob.sandboxes()]
            with pytest.raises(NotFound):
                Sandbox.connect(sb.id, client=bob)
            with pytest.raises(NotFound):
                Sandbox(sb.info(), bob).exec(["echo", "not yours"])
            # the owner (unix socket) sees every sandbox
            with Client(socket=tcp_server.socket) as owner:
                assert sb.id in [s.id for s in owner.sandboxes()]


def test_beyond_the_token_ceiling_is_forbidden(tcp_server: Server) -> None:
    with Client(tcp_server.url, token=tcp_server.tokens["bob"]) as bob:
        with pytest.raises(Forbidden) as err:
            Sandbox.create(preset="high", client=bob)  # bob's ceiling is low
        assert err.value.status == 403
        with Sandbox.create(preset="low", client=bob):
            with pytest.raises(Forbidden):  # bob may have one sandbox at once
                Sandbox.create(preset="low", client=bob)


def test_env_names_the_server_and_token(tcp_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORDON_URL", tcp_server.url or "")
    monkeypatch.setenv("CORDON_TOKEN", tcp_server.tokens["alice"])
    with Sandbox.create(preset="low") as sb:
        assert sb.info().owner == "alice"


def test_at_capacity_is_rate_limited_with_retry_after(tcp_server: Server) -> None:
    with Client(socket=tcp_server.socket) as owner:
        held = [Sandbox.create(preset="low", client=owner) for _ in range(MAX_SANDBOXES)]
        try:
            with pytest.raises(RateLimited) as err:
                Sandbox.create(preset="low", client=owner)
            assert err.value.status == 429
            assert err.value.retry_after is not None and err.value.retry_after > 0
        finally:
            for sb in held:
                sb.delete()
        # room again once they are gone
        with Sandbox.create(preset="low", client=owner) as sb:
            assert sb.info().running
