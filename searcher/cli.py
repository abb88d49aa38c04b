"""``searcher serve | search | research | index | cache | keys | config | plugins | eval``: a thin
layer over the library.

Domain errors become one-line messages and exit codes here, at the edge; no traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
import yaml
from pydantic import ValidationError

from searcher import __version__
from searcher.config import Settings, load_settings, masked
from searcher.errors import (
    AllBackendsFailed,
    ConfigError,
    InvalidRequest,
    RemoteError,
    SearcherError,
    StateUnavailable,
    UnknownRecording,
    describe_failures,
)

if TYPE_CHECKING:
    from searcher.contract import ResearchRequest, SearchRequest
    from searcher.fetch.page_reader import PageOutcome

T = TypeVar("T")
# Results of each backend pooled per query in a frozen set (as `searcher judge --depth`).
POOL_DEPTH = 10
STATE_STORE_PROBLEM = "cannot use the state store (state.redis_url / state.dir / qdrant_url)"
CORPUS_PROBLEM = "cannot open the collections (corpus.dir / corpus.qdrant_url)"
config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    multiple=True,
    help="Path to searcher.yaml; given several times, later files win key by key "
    "(default: $SEARCHER_CONFIG, else ./searcher.yaml if there is one, else built-in "
    "defaults).",
)


def _fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"searcher: {message}", err=True)
    sys.exit(code)


def _settings(config_path: tuple[str, ...]) -> Settings:
    try:
        return load_settings(config_path)
    except ConfigError as exc:
        _fail(str(exc), 2)


def _run(coro_fn: Callable[[], Awaitable[T]], state_problem: str = STATE_STORE_PROBLEM) -> T:
    """Run a command's async work; Ctrl-C exits 130, a state store it cannot use exits 2
    with ``state_problem`` before the reason."""
    try:
        return asyncio.run(coro_fn())  # type: ignore[arg-type]
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except StateUnavailable as exc:
        _fail(f"{state_problem}: {exc}", 2)


class _Commands(click.Group):
    """The command group. Ctrl-C anywhere in a command ends it as it does in ``_run``:
    one line, exit 130. Before a command's async work (its imports, the config, the
    start-up probes) click would print "Aborted!" and exit 1, the code of every backend
    failing."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            _fail("interrupted", 130)


@click.group(cls=_Commands)
@click.version_option(__version__, prog_name="searcher")
def main() -> None:
    """Self-hosted Search API for LLMs and agents."""


# The request fields ``searcher search`` sets from its options: a bad value is named by
# the option the user typed.
_SEARCH_FLAGS = {
    "query": "query",
    "query.text": "query",
    "constraints.backend": "--backend",
    "constraints.multi_query": "--multi-query",
    "constraints.want_n": "--llm-rank",
    "budget.max_results": "--max-results",
    "budget.max_context_chars": "--max-chars",
}
_CRAWL_FLAGS = {
    "url": "URL",
    "limit": "--limit",
    "max_depth": "--max-depth",
    "max_breadth": "--max-breadth",
    "query": "--query",
    "select_paths": "--select-path",
    "exclude_paths": "--exclude-path",
    "politeness_delay_s": "--delay",
}


def _fail_invalid(problem: InvalidRequest, flags: dict[str, str]) -> NoReturn:
    """Exit 2 naming the option the user typed for a bad request field (the second
    ``--select-path`` for ``select_paths.1``), else the field."""
    flag = flags.get(problem.field) or flags.get(problem.field.rsplit(".", 1)[0])
    _fail(f"invalid {flag}: {problem.message}" if flag else f"invalid {problem}", 2)


@main.command()
@click.option("--host", default=None, help="Interface to bind (default from config: 127.0.0.1).")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=None, help="Port (default from config: 8080)."
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Worker processes. They share one state (caches, breakers, keys, rate limits).",
)
@config_option
def serve(host: str | None, port: int | None, workers: int, config_path: tuple[str, ...]) -> None:
    """Run the HTTP API (OpenAPI docs at /docs)."""
    import os

    from searcher.api.app import create_app
    from searcher.api.http_server import run_server

    settings = _settings(config_path)  # read here too, so a bad config fails before binding
    metrics_dir = None
    if workers > 1 and settings.metrics.enabled:
        metrics_dir = _share_metrics_between_workers()
    _check_state(settings)  # an unreachable Redis fails here, not in every worker
    # The address bound is the one the Host check allows by default: the app must see it.
    bound_port = settings.server.port if port is None else port
    server = settings.server.model_copy(
        update={"host": host or settings.server.host, "port": bound_port}
    )
    settings = settings.model_copy(update={"server": server})
    # SIGTERM / Ctrl-C: requests in flight get server.shutdown_grace_s to finish, then the
    # server stops anyway (an open stream or a slow client cannot hold it up).
    options: dict[str, Any] = {
        "log_level": "info",
        "log_config": _log_config(settings.logging.access),
        "access_log": False,
        "timeout_graceful_shutdown": server.shutdown_grace_s,
    }
    _check_address(server.host, server.port)  # before start-up work, and in one line
    _print_startup_report(config_path, settings)
    if workers == 1:
        if not _served(lambda: run_server(create_app(settings), server, **options)):
            # The reason (e.g. the app's start-up failed) is in uvicorn's log above.
            _fail(f"could not serve on {server.host}:{server.port}", 2)
        return
    # Worker processes build their own app from an import string; they find the config
    # file, and the address bound, through the environment.
    if config_path:
        os.environ["SEARCHER_CONFIG"] = os.pathsep.join(os.path.abspath(p) for p in config_path)
    os.environ["SEARCHER_HOST"], os.environ["SEARCHER_PORT"] = server.host, str(server.port)
    try:
        if not run_server("searcher.api.app:create_worker_app", server, workers, **options):
            _fail(f"could not serve on {server.host}:{server.port}: a worker could not "
                  "start (its reason is in the log above)", 2)  # fmt: skip
    finally:
        if metrics_dir is not None:  # the one this run made: gone with it
            import shutil

            shutil.rmtree(metrics_dir, ignore_errors=True)


def _print_startup_report(config_path: tuple[str, ...], settings: Settings) -> None:
    """The start-up block on stderr: the config file read, each backend and whether it
    answered a probe, the embedder, the LLM endpoint, look-alike variables ignored."""
    import os

    from searcher.config_hints import find_config_file
    from searcher.startup_report import probe_backends, report_lines

    reaches = asyncio.run(probe_backends(settings))
    # Several files: named together, as the start-up report's one config line.
    given = " + ".join(config_path) if len(config_path) > 1 else (config_path or (None,))[0]
    config = find_config_file(given, os.environ)
    for line in report_lines(config, settings, reaches, os.environ):
        click.echo(line, err=True)


def _check_address(host: str, port: int) -> None:
    """Exit 2 with one line when ``host:port`` cannot be listened on (the port is taken,
    or the address is not this machine's): a server address to configure differently.
    The socket is opened as uvicorn opens its own, and closed again at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family=family) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        _fail(f"cannot listen on {host}:{port}: {reason} (server.host/port, --host/--port)", 2)


def _served(serve: Callable[[], bool]) -> bool:
    """Whether ``serve`` ran the server; uvicorn exits instead (``sys.exit(3)``) when it
    cannot bind or the app's start-up fails. Ctrl-C is how a server is stopped: uvicorn
    shuts down, then raises it again, and that is a server that ran."""
    try:
        return serve()
    except KeyboardInterrupt:
        return True
    except SystemExit as exc:
        if exc.code in (0, None):
            raise
        return False


def _check_state(settings: Settings) -> None:
    """Exit 2 with a clear message when the state store cannot be reached."""
    from searcher.state import open_store

    async def check() -> None:
        store = await open_store(settings.state)
        await store.aclose()
        if settings.state.qdrant_url and settings.cache.semantic.enabled:
            from searcher.cache.semantic_qdrant import open_qdrant

            client = await open_qdrant(settings.state.qdrant_url)
            await client.close()
        corpus_location = settings.corpus.qdrant_location(settings.state)
        instances = settings.backends.instances.values()
        if corpus_location and any(i.get("adapter") == "local" for i in instances):
            from searcher.corpus.qdrant_store import client_for

            client_for(corpus_location).close()  # local collections in a Qdrant that answers

    _run(check)


def _log_config(access: bool) -> dict[str, Any]:
    """uvicorn's logging, plus the JSON access lines (``logging.access``) on stderr, one
    per request. uvicorn applies it once in each process it serves from (a worker starts
    afresh, without the parent's loggers); each time, it replaces the handlers."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["searcher_access"] = {"format": "%(message)s"}
    config["handlers"]["searcher_access"] = {
        "class": "logging.StreamHandler",
        "formatter": "searcher_access",
        "stream": "ext://sys.stderr",
    }
    config["loggers"]["searcher.access"] = {
        "handlers": ["searcher_access"],
        "level": "INFO" if access else "WARNING",
        "propagate": False,
    }
    return config


def _share_metrics_between_workers() -> str | None:
    """Workers write their metrics to one directory that a scrape sums (set before any
    worker imports prometheus_client): ``$PROMETHEUS_MULTIPROC_DIR`` when set (exit 2
    unless it is a folder we can write), else a fresh one, whose path is returned (the
    caller removes it)."""
    import os
    import tempfile

    from searcher.api.metrics import MULTIPROC_ENV

    given = os.environ.get(MULTIPROC_ENV)
    if given:
        # Every worker would fail at its first metric, and be restarted, without end.
        if not (os.path.isdir(given) and os.access(given, os.W_OK | os.X_OK)):
            _fail(f"${MULTIPROC_ENV} ({given}) is not a folder this user can write", 2)
        return None
    made = tempfile.mkdtemp(prefix="searcher-metrics-")
    os.environ[MULTIPROC_ENV] = made
    return made


def _progress_printer() -> Callable[[int, int, str, PageOutcome], None] | None:
    if not sys.stderr.isatty():
        return None

    def report(done: int, total: int, url: str, outcome: PageOutcome) -> None:
        if outcome.cancelled:
            click.echo(f"[{done}/{total}] cancelled {url}", err=True)
            return
        detail = outcome.skip_reason or outcome.error or f"{outcome.extracted_chars} chars"
        click.echo(f"[{done}/{total}] {outcome.status:<7} {url} ({detail})", err=True)

    return report


async def _search_in_process(settings: Settings, request: SearchRequest) -> dict[str, Any]:
    import uuid

    from searcher.recording.recorder import check_recordable, recorded_search
    from searcher.runtime import open_service  # heavy (LLM client, extraction): only when used

    async with open_service(
        settings, extract_in_process=True, sweep=False, wait_for_embedder=True
    ) as runtime:

        def run() -> Awaitable[Any]:
            return runtime.service.search(request, progress=_progress_printer())

        if not request.constraints.record:
            return (await run()).to_wire(request.want)
        book = check_recordable(settings.recording, runtime.state)
        response = await recorded_search(book, uuid.uuid4().hex, request, run)
        if response.meta.request_id:
            click.echo(f"recorded as {response.meta.request_id}", err=True)
        return response.to_wire(request.want)


async def _search_remote(url: str, api_key: str | None, request: SearchRequest) -> dict[str, Any]:
    from searcher.client import AsyncSearcherClient

    try:
        client = AsyncSearcherClient(url, api_key=api_key)
    except ValueError as exc:
        option = "--api-key" if str(exc).startswith("api_key") else "--remote"
        raise InvalidRequest(option, str(exc)) from exc
    async with client:
        return (await client.search(request)).to_wire(request.want)


@main.command()
@click.argument("query")
@click.option("--mode", type=click.Choice(["simple", "full"]), default="simple", show_default=True)
@click.option(
    "--backend",
    default=None,
    help="searxng, duckduckgo, brave, a named instance (backends.instances; a local "
    "collection's too), several comma-separated (fused), or auto.",
)
@click.option("--max-results", type=click.IntRange(1, 100), default=None, help="Results wanted.")
@click.option("--max-chars", type=click.IntRange(0), default=None, help="Context pack budget.")
@click.option("--json", "as_json", is_flag=True, help="Print the UCP-1 JSON instead of the pack.")
@click.option(
    "--remote",
    metavar="URL",
    envvar="SEARCHER_REMOTE",
    default=None,
    help="Search through the searcher API at URL instead of in-process (default: "
    "$SEARCHER_REMOTE); --config is then not read.",
)
@click.option(
    "--api-key",
    envvar="SEARCHER_API_KEY",
    default=None,
    help="With --remote: the key a server with auth.enabled asks for (default: $SEARCHER_API_KEY).",
)
@click.option("--rewrite", is_flag=True, help="LLM query rewrite first.")
@click.option("--multi-query", type=int, default=None, metavar="N", help="Search N perspectives.")
@click.option("--crag", is_flag=True, help="Grade the evidence; re-search when it is weak.")
@click.option("--llm-rank", "want_n", type=int, default=None, metavar="N", help="LLM picks N.")
@click.option("--answer", is_flag=True, help="Also print an LLM answer with [n] citations.")
@click.option("--answer-check", is_flag=True, help="Grade the answer (implies --answer).")
@click.option(
    "--record",
    is_flag=True,
    help="Keep what the search got (backend answers, pages, LLM replies) for "
    "`searcher replay ID` and `searcher freeze`; its id is printed (meta.request_id).",
)
@config_option
def search(
    query: str,
    mode: str,
    backend: str | None,
    max_results: int | None,
    max_chars: int | None,
    as_json: bool,
    remote: str | None,
    api_key: str | None,
    rewrite: bool,
    multi_query: int | None,
    crag: bool,
    want_n: int | None,
    answer: bool,
    answer_check: bool,
    record: bool,
    config_path: tuple[str, ...],
) -> None:
    """Search, in-process or on a running searcher (--remote), and print the context pack.
    The LLM steps need llm.base_url and llm.model; without them they fall back."""
    body: dict[str, Any] = {"query": query, "constraints": {"search_mode": mode}, "budget": {}}
    constraints = body["constraints"]
    if record:
        constraints["record"] = True
    if backend:
        names = [name.strip() for name in backend.split(",")]
        constraints["backend"] = names if len(names) > 1 else backend
    if rewrite:
        constraints["rewrite"] = True
    if multi_query is not None:
        constraints["multi_query"] = multi_query
    if crag:
        constraints["crag"] = True
    if want_n is not None:
        constraints.update(rank="llm", want_n=want_n)
    if answer or answer_check:
        body["want"] = {"answer": True, "answer_check": answer_check}
    if max_results is not None:
        body["budget"]["max_results"] = max_results
    if max_chars is not None:
        body["budget"]["max_context_chars"] = max_chars
    # Imported here, as the other commands' request models are: building the contract's
    # models costs ~0.3 s of CPU, which ``searcher index add`` and the rest need not pay.
    from searcher.contract import SearchRequest

    try:
        request = SearchRequest.model_validate(body)
    except ValidationError as exc:
        _fail_invalid(InvalidRequest.from_validation(exc.errors()), _SEARCH_FLAGS)
    if remote:
        run = functools.partial(_search_remote, remote, api_key, request)
    else:
        settings = _settings(config_path)
        if sys.stderr.isatty():  # as the progress lines: for a person, not a script
            _print_startup_report(config_path, settings)
        run = functools.partial(_search_in_process, settings, request)
    try:
        data = _run(run)
    except InvalidRequest as exc:  # a value only the search can judge (backend names, limits)
        _fail_invalid(exc, _SEARCH_FLAGS)
    except AllBackendsFailed as exc:
        if not exc.failures:  # none was tried: "no backend is enabled"
            _fail(str(exc), 1)
        listed = describe_failures(exc.failures, separator="\n  ")
        _fail(f"all search backends failed:\n  {listed}", 1)
    except RemoteError as exc:
        hint = " (give one with --api-key or $SEARCHER_API_KEY)" if exc.status == 401 else ""
        _fail(f"{exc}{hint}", 1)
    except SearcherError as exc:
        _fail(str(exc), 1)
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False, indent=2))
    else:
        _print_search(data)


def _print_search(data: dict[str, Any]) -> None:
    """A search's notes (stderr), its pack, and its answer and check if any."""
    for error in data["meta"]["errors"]:
        click.echo(f"note: {error['stage']} {error['source']}: {error['reason']}", err=True)
    click.echo(data.get("rendered_text", ""))
    if data.get("answer"):
        click.echo(f"\nAnswer: {data['answer']}")
        for cited in data.get("answer_citations") or []:
            click.echo(f"  [{cited['ref']}] {cited['url']}")
    check = data["meta"].get("answer_check")
    if check:
        click.echo(
            f"Check ({check['method']}): {check['isrel']}, {check['issup']}, "
            f"usefulness {check['isuse']}/5"
        )


async def _open_recordings(runtime: Any, ids: tuple[str, ...]) -> list[Any]:
    """The recordings of ``ids`` from the runtime's state store (``UnknownRecording``)."""
    from searcher.recording.book import RecordingBook

    if runtime.state is None:
        raise StateUnavailable("no state store is open")
    book = RecordingBook(runtime.state, runtime.settings.recording)
    return [await book.get(request_id) for request_id in ids]


def _recordings_settings(config_path: tuple[str, ...]) -> Settings:
    """The settings a replay or a freeze runs under: the ``--config`` files given; unless
    they name a state store themselves, laid over the configuration found without
    ``--config`` ($SEARCHER_CONFIG, ./searcher.yaml, the environment), whose state store
    holds the recordings: a fragment that changes only ranking (``fusion: {rrf_k: 10}``)
    replays the search as it was made, with that change."""
    from searcher.config import config_tree, home_config_files
    from searcher.recording.rerun import names_state_store

    if not config_path:
        return _settings(config_path)
    try:
        given = config_tree(config_path, environ={})
    except ConfigError as exc:
        _fail(str(exc), 2)
    if names_state_store(given):
        return _settings(config_path)
    return _settings((*home_config_files(), *config_path))


@main.command("replay")
@click.argument("request_id")
@click.option("--json", "as_json", is_flag=True, help="Print the replayed response (JSON).")
@config_option
def replay_command(request_id: str, as_json: bool, config_path: tuple[str, ...]) -> None:
    """Run a recorded search (constraints.record, search --record) again on exactly what
    it got, offline, under this configuration; print what changed (items, order, pack),
    or with --json the replayed response without its timings."""
    from searcher.recording.book import recorded_request
    from searcher.recording.rerun import changes, replay, stable_view
    from searcher.runtime import open_service

    settings = _recordings_settings(config_path)

    async def run() -> tuple[Any, dict[str, Any]]:
        async with open_service(
            settings, extract_in_process=True, sweep=False, wait_for_embedder=True
        ) as runtime:
            (recording,) = await _open_recordings(runtime, (request_id,))
            response = await replay(runtime.service.parts, recording)
            return recording, response.to_wire(recorded_request(recording).want)

    try:
        recording, replayed = _run(run)
    except UnknownRecording as exc:
        _fail(str(exc), 2)
    except SearcherError as exc:  # e.g. every backend's answer missing from the recording
        _fail(str(exc), 1)
    if as_json:
        click.echo(json.dumps(stable_view(replayed), ensure_ascii=False, indent=2))
        return
    query = recorded_request(recording).query_text
    click.echo(f"replayed {recording.request_id} (recorded {recording.created_utc}): {query}")
    for line in changes(recording.response, replayed):
        click.echo(line)


@main.command("freeze")
@click.argument("request_ids", nargs=-1, required=True)
@click.option("--out", "out_path", required=True, help="Directory to write the set into.")
@config_option
def freeze_command(
    request_ids: tuple[str, ...], out_path: str, config_path: tuple[str, ...]
) -> None:
    """Write recorded searches as a self-contained evaluation set (queries, pooled
    results, pages, the recorded run) that `searcher tune --set` and `searcher eval` read
    without the network."""
    from pathlib import Path

    from searcher.pipeline.replay import capture, pooled
    from searcher.recording.book import recorded_request
    from searcher.recording.frozen import FrozenSetError, check_destination, freeze
    from searcher.runtime import open_service

    settings = _recordings_settings(config_path)
    request_ids = tuple(dict.fromkeys(request_ids))  # an id named twice is one query
    try:
        check_destination(Path(out_path))  # before the searches are replayed
    except FrozenSetError as exc:
        _fail(f"--out {exc}", 2)

    async def run() -> tuple[list[Any], dict[str, Any]]:
        async with open_service(settings, extract_in_process=True, sweep=False) as runtime:
            recordings = await _open_recordings(runtime, request_ids)
            by_id = {r.request_id: r for r in recordings}
            queries = {qid: recorded_request(r).query_text for qid, r in by_id.items()}
            found = await capture(runtime.service.parts, queries, recorded=by_id)
            return recordings, {c.qid: pooled(c, POOL_DEPTH) for c in found.queries}

    try:
        recordings, hits = _run(run)
    except UnknownRecording as exc:
        _fail(str(exc), 2)
    try:
        frozen = freeze(recordings, hits, Path(out_path))
    except OSError as exc:
        _fail(f"cannot write {out_path}: {exc.strerror or exc}", 2)
    except FrozenSetError as exc:  # files appeared there meanwhile
        _fail(f"--out {exc}", 2)
    pages = sum(e.kind == "page" for r in recordings for e in r.exchanges)
    click.echo(
        f"wrote {out_path}: {len(frozen.queries)} queries, "
        f"{sum(len(h) for h in hits.values())} pooled results, {pages} pages"
    )


def _describe_event(kind: str, data: dict[str, Any]) -> str:
    """One line of research progress for a terminal."""
    where = f"[round {data['round']}] " if "round" in data else ""
    if kind == "plan":
        return f"{where}plan ({data['source']}): " + " | ".join(data["sub_questions"])
    if kind == "search":
        found = data.get("error") or f"{data['results']} results, {data.get('new_urls', 0)} new"
        return f"{where}search: {data['sub_question']} ({found})"
    if kind == "read":
        return f"{where}read {data['status']}: {data['url']} ({data['passages']} passages)"
    if kind == "evidence":
        done = sum(1 for c in data["coverage"] if c["covered"])
        return f"{where}evidence: {done}/{len(data['coverage'])} sub-questions covered"
    if kind == "verify":
        return f"verify: {data['status']} ({data['supported']}/{data['claims']} claims supported)"
    return f"{kind}: {json.dumps(data, ensure_ascii=False)}"


async def _research_in_process(
    settings: Settings, request: ResearchRequest, show: bool
) -> dict[str, Any]:
    from searcher.research.loop import Research
    from searcher.runtime import open_service

    async def emit(kind: str, data: dict[str, Any]) -> None:
        if show:
            click.echo(_describe_event(kind, data), err=True)

    async with open_service(settings, extract_in_process=True, sweep=False) as runtime:
        result = await Research(request, runtime.service.parts, emit).run()
        return result.model_dump(mode="json")


@main.command()
@click.argument("question")
@click.option(
    "--preset",
    type=click.Choice(["minimal", "balanced", "enhanced", "research", "full"]),
    default="balanced",
    show_default=True,
    help="How far to go: rounds, sub-questions, pages read (5/10/10/15/15).",
)
@click.option("--max-time", "max_time_s", type=click.IntRange(1, 900), default=None,
              help="Deadline in seconds (default: the preset's).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
@config_option
def research(
    question: str, preset: str, max_time_s: int | None, as_json: bool, config_path: tuple[str, ...]
) -> None:
    """Research a question over several rounds of searching and reading; print the report
    (an evidence report without an LLM). Progress goes to stderr on a terminal."""
    from searcher.contract import ResearchRequest
    from searcher.errors import ResearchFailed

    body: dict[str, Any] = {"query": question, "preset": preset}
    if max_time_s is not None:
        body["budget"] = {"max_total_time_ms": max_time_s * 1000}
    try:
        request = ResearchRequest.model_validate(body)
    except ValidationError as exc:
        _fail(f"invalid {InvalidRequest.from_validation(exc.errors())}", 2)
    settings = _settings(config_path)
    try:
        result = _run(
            functools.partial(_research_in_process, settings, request, sys.stderr.isatty())
        )
    except ResearchFailed as exc:
        _fail(str(exc), 1)
    except SearcherError as exc:
        _fail(str(exc), 1)
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False, indent=2))
        return
    for error in result["errors"]:  # as search prints them: what fell back, what was cut
        click.echo(f"note: {error['stage']} {error['source']}: {error['reason']}", err=True)
    click.echo(result["report"] or "")
    click.echo(
        f"\n(confidence {result['confidence']}, {result['verification_status']}, "
        f"stopped: {result['stopped']}, {result['usage']['rounds']} rounds, "
        f"{result['usage']['pages_read']} pages)",
        err=True,
    )


@main.command()
@click.argument("url")
@click.option("--limit", type=int, default=50, show_default=True, help="Pages read at most.")
@click.option("--max-depth", type=int, default=1, show_default=True, help="Link hops from URL.")
@click.option("--max-breadth", type=int, default=20, show_default=True,
              help="Links followed per page at most.")  # fmt: skip
@click.option("--query", default=None, help="Follow the links that match it first.")
@click.option("--select-path", "select_paths", multiple=True, metavar="REGEX",
              help="Only paths matching one of these (repeatable).")  # fmt: skip
@click.option("--exclude-path", "exclude_paths", multiple=True, metavar="REGEX",
              help="Leave out paths matching one of these (repeatable).")  # fmt: skip
@click.option("--delay", "delay_s", type=float, default=None,
              help="Seconds between two requests to a host "
              "(default: crawl.politeness_delay_s).")  # fmt: skip
@click.option("--collection", metavar="NAME", default=None,
              help="Index the pages into this collection of own documents "
              "(it must exist).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the pages as JSON.")
@config_option
def crawl(
    url: str, limit: int, max_depth: int, max_breadth: int, query: str | None,
    select_paths: tuple[str, ...], exclude_paths: tuple[str, ...], delay_s: float | None,
    collection: str | None, as_json: bool, config_path: tuple[str, ...],
) -> None:  # fmt: skip
    """Crawl a site breadth first from URL (robots.txt honoured, duplicates skipped) and
    print each page's URL, or the pages as JSON; progress goes to stderr on a terminal."""
    from searcher.contract import CrawlRequest

    body: dict[str, Any] = {
        "url": url, "limit": limit, "max_depth": max_depth, "max_breadth": max_breadth,
        "query": query, "select_paths": list(select_paths), "exclude_paths": list(exclude_paths),
        "politeness_delay_s": delay_s,
    }  # fmt: skip
    try:
        request = CrawlRequest.model_validate({k: v for k, v in body.items() if v is not None})
    except ValidationError as exc:
        _fail_invalid(InvalidRequest.from_validation(exc.errors()), _CRAWL_FLAGS)
    settings = _settings(config_path)
    found = _crawl_here(settings, request, collection)
    if collection is not None:
        _crawled_into(settings, collection, found.pages)
    if as_json:
        pages = [p.model_dump(mode="json") for p in found.pages]
        skipped = [s.model_dump(mode="json") for s in found.skipped]
        out = {"pages": pages, "skipped": skipped, "complete": found.complete}
        click.echo(json.dumps(out, ensure_ascii=False, indent=2))
        return
    for page in found.pages:
        click.echo(f"{page.url}\t{len(page.content)} chars")
    cut = "" if found.complete else ", cut by a budget or the deadline"
    click.echo(f"({len(found.pages)} pages, {len(found.skipped)} skipped{cut})", err=True)
    if not found.pages:  # not even the start page: say why, and fail
        why = "; ".join(f"{s.url}: {s.error or s.reason}" for s in found.skipped[:3])
        guard = any("address" in (s.error or "") for s in found.skipped)
        hint = " (fetch.allowed_hosts lists hosts the address guard lets through)" if guard else ""
        _fail(f"no page was read: {why or 'nothing to read'}{hint}", 1)


def _crawl_here(settings: Settings, request: Any, collection: str | None) -> Any:
    """Crawl in this process (``searcher crawl``); exit 2 for a bad option or collection."""
    from searcher.api.crawl_routes import crawl_plan
    from searcher.corpus import operations
    from searcher.corpus.store import check_collection_name
    from searcher.site.crawl_local import crawl_here

    try:
        plan = crawl_plan(request, settings)
        if collection is not None and not operations.collection_exists(
            settings, check_collection_name(collection)
        ):
            _fail(f"no collection {collection!r}: index one first (searcher index add) or "
                  "name it in backends.instances", 2)  # fmt: skip
    except InvalidRequest as exc:
        _fail_invalid(exc, _CRAWL_FLAGS)
    except ValueError as exc:
        _fail(str(exc), 2)
    tty = sys.stderr.isatty()

    def progress(item: Any) -> None:
        if tty:  # for a person, not a script
            reason, error = getattr(item, "reason", None), getattr(item, "error", None)
            said = f"{'skip ' + reason if reason else 'page'}\t{item.url}"
            click.echo(f"{said}\t{error}" if error else said, err=True)

    return _run(lambda: crawl_here(settings, plan, request.max_chars_per_page, progress))


def _crawled_into(settings: Settings, collection: str, pages: list[Any]) -> None:
    """Index crawled pages into ``collection``; say what became of them on stderr."""
    from searcher.corpus import operations
    from searcher.errors import EmbedderMisconfigured, EmbedderUnavailable
    from searcher.site.crawl_local import page_file

    try:
        results = _run(
            lambda: operations.add_files(settings, collection, [page_file(p) for p in pages])
        )
    except ValueError as exc:
        _fail(str(exc), 2)
    except EmbedderMisconfigured as exc:
        _fail(f"cannot load the embedder ({exc})", 2)
    except EmbedderUnavailable as exc:
        _fail(f"cannot load the embedder ({exc})", 1)
    counts = {status: sum(r.status == status for r in results)
              for status in ("indexed", "unchanged", "skipped")}  # fmt: skip
    click.echo(f"{collection}: {counts['indexed']} indexed, {counts['unchanged']} unchanged, "
               f"{counts['skipped']} skipped", err=True)  # fmt: skip


@main.command("mcp")
@config_option
def mcp_stdio(config_path: tuple[str, ...]) -> None:
    """Serve the MCP tools web_search, fetch_page, deep_research and crawl_site on
    stdin/stdout."""
    from searcher.tools.mcp_server import serve_stdio

    settings = _settings(config_path)
    try:
        _run(lambda: serve_stdio(settings))
    except SearcherError as exc:
        _fail(str(exc), 1)


@main.group()
def index() -> None:
    """Own documents: index folders into collections, searched by adapter: local."""


collection_option = click.option(
    "--collection", "collection", metavar="NAME", help="The collection (letters, digits, _ . -)."
)


@index.command("add")
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--collection", "collection", metavar="NAME", required=True, help="The collection.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show each file as it is done (default: on a terminal).",
)
@config_option
def index_add(
    paths: tuple[str, ...], collection: str, progress: bool | None, config_path: tuple[str, ...]
) -> None:
    """Index files and folders into a collection. Re-running it updates the collection:
    unchanged files are skipped, changed ones re-indexed, deleted ones removed."""
    from searcher.corpus import operations
    from searcher.corpus.roots import PathRefused
    from searcher.errors import EmbedderMisconfigured, EmbedderUnavailable

    settings = _settings(config_path)
    show = sys.stderr.isatty() if progress is None else progress
    try:
        report = _run(
            lambda: operations.add(settings, paths, collection, _index_progress(show)),
            CORPUS_PROBLEM,
        )
    except (PathRefused, ValueError) as exc:
        _fail(str(exc), 2)
    except EmbedderUnavailable as exc:
        # A model that is not where the config says is bad input (2); an embedding
        # endpoint that fails is a failure (1).
        code = 2 if isinstance(exc, EmbedderMisconfigured) else 1
        _fail(f"cannot load the embedder ({exc}); embeddings.provider: none indexes for "
              "keyword search only", code)  # fmt: skip
    if show and sys.stderr.isatty():
        click.echo("", err=True)  # end the progress line
    click.echo(
        f"{collection}: {report.indexed} indexed ({report.chunks} chunks), "
        f"{report.unchanged} unchanged, {report.removed} removed, {len(report.skipped)} skipped"
    )
    for path, reason, detail in report.skipped:
        click.echo(f"  skipped {path}: {reason} ({detail})")


def _index_progress(show: bool) -> Callable[[int, int, str, str], None] | None:
    if not show:
        return None
    tty = sys.stderr.isatty()

    def report(done: int, total: int, path: str, outcome: str) -> None:
        line = f"[{done}/{total}] {outcome:<9} {path}"
        if tty:  # one line, rewritten
            click.echo(f"\r\x1b[K{line[:160]}", err=True, nl=False)
        else:
            click.echo(line, err=True)

    return report


@index.command("status")
@collection_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@config_option
def index_status(collection: str | None, as_json: bool, config_path: tuple[str, ...]) -> None:
    """Collections, their files, chunks, bytes and when each file was indexed, and every
    skipped file with its reason."""
    from searcher.corpus import operations

    settings = _settings(config_path)
    try:
        found = operations.status(settings, collection)
    except (ValueError, StateUnavailable) as exc:
        _fail(str(exc), 2)
    if as_json:
        click.echo(json.dumps([_collection_json(c) for c in found], indent=2))
        return
    if not found:
        click.echo(f"no collections in {operations.where(settings)}")
    for c in found:
        click.echo(
            f"{c.name}: {len(c.documents)} files, {c.chunks} chunks, {c.bytes} bytes, "
            f"{len(c.skipped)} skipped, vectors: {c.embedder or 'none (keywords only)'}"
        )
        for d in c.documents:
            click.echo(f"  {_when(d.indexed_at)}  {d.chunks:>5} chunks  {d.path}")
        for s in c.skipped:
            click.echo(f"  skipped  {s.reason:<14} {s.path} ({s.detail})")


def _when(timestamp: float) -> str:
    import datetime

    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _collection_json(c: Any) -> dict[str, Any]:
    return {
        "collection": c.name,
        "embedder": c.embedder,
        "files": len(c.documents),
        "chunks": c.chunks,
        "bytes": c.bytes,
        "documents": [
            {
                "path": d.path,
                "kind": d.kind,
                "title": d.title,
                "bytes": d.size,
                "chunks": d.chunks,
                "indexed_at": _when(d.indexed_at),
            }
            for d in c.documents
        ],
        "skipped": [{"path": s.path, "reason": s.reason, "detail": s.detail} for s in c.skipped],
    }


@index.command("remove")
@click.argument("path", required=False, metavar="[PATH]")
@collection_option
@config_option
def index_remove(path: str | None, collection: str | None, config_path: tuple[str, ...]) -> None:
    """Drop a file or folder from the index (from --collection, else from every
    collection), or with --collection alone the whole collection and the server's copies
    of files uploaded or crawled into it."""
    from searcher.corpus import operations

    if path is None and collection is None:
        _fail("index remove: give a PATH, --collection NAME, or both", 2)
    settings = _settings(config_path)
    try:
        removed = operations.remove(settings, path, collection)
    except (ValueError, StateUnavailable) as exc:
        _fail(str(exc), 2)
    what = path if path is not None else f"collection {collection}"
    click.echo(f"removed {what}: {removed} documents")


@main.group()
def cache() -> None:
    """Inspect, prune or empty the caches (extracted pages, search results)."""


async def _with_state(settings: Settings, use: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``use`` on the configured state store (the result cache's home)."""
    from searcher.state import build_store

    store = build_store(settings.state)
    try:
        return await use(store)
    finally:
        await store.aclose()


def _state_call(settings: Settings, use: Callable[[Any], Awaitable[T]]) -> T:
    return _run(lambda: _with_state(settings, use))


@cache.command("stats")
@config_option
def cache_stats(config_path: tuple[str, ...]) -> None:
    """Print the entries and bytes of the extraction cache, and the entries and vectors of
    the result cache (hits and misses are a running server's: GET /v1/cache/stats)."""
    from searcher.cache.extraction import ExtractionCache

    settings = _settings(config_path)
    store = ExtractionCache(settings.cache_dir(), settings.service.cache.ttl_s)
    from searcher.cache.results import NAMESPACE

    state = _state_call(settings, lambda s: s.stats(NAMESPACE))
    # Hits, misses and evictions are counted by the process that serves: this one served none.
    held = {k: v for k, v in store.stats().items() if k in ("entries", "bytes")}
    stats = {
        "dir": str(settings.cache_dir()),
        **held,
        "results": {
            "engine": state.engine,
            "location": state.location,
            "entries": state.entries,
            "vectors": state.vectors,
        },
    }
    click.echo(json.dumps(stats, indent=2))


@cache.command("clear")
@config_option
def cache_clear(config_path: tuple[str, ...]) -> None:
    """Remove every cached extraction and every cached search result (with the semantic
    cache's vectors, in Qdrant too when state.qdrant_url is set)."""
    from searcher.cache.extraction import ExtractionCache
    from searcher.cache.results import NAMESPACE

    settings = _settings(config_path)
    store = ExtractionCache(settings.cache_dir(), settings.service.cache.ttl_s)
    removed = _run(store.clear)
    click.echo(f"removed {removed} entries from {settings.cache_dir()}")

    async def clear_results(state: Any) -> Any:
        held = await state.stats(NAMESPACE)  # clear counts rows: vectors are not results
        await state.clear(NAMESPACE)
        return held

    held = _state_call(settings, clear_results)
    what = f"{held.entries} search results"
    what += f" and {held.vectors} query vectors" if held.vectors else ""
    click.echo(f"removed {what} from {build_location(settings)}")
    if settings.state.qdrant_url:
        from searcher.cache.semantic_qdrant import clear_qdrant

        url = settings.state.qdrant_url
        vectors = _run(lambda: clear_qdrant(url), "cannot clear the semantic cache's vectors")
        click.echo(f"removed {vectors} query vectors from Qdrant at {url}")


@cache.command("prune")
@config_option
def cache_prune(config_path: tuple[str, ...]) -> None:
    """Remove expired entries now (searcher serve also does it every
    service.cache.sweep_interval_s)."""
    from searcher.cache.extraction import ExtractionCache

    settings = _settings(config_path)
    store = ExtractionCache(settings.cache_dir(), settings.service.cache.ttl_s)
    removed = _run(store.sweep)
    click.echo(f"removed {removed} expired entries from {settings.cache_dir()}")
    pruned = _state_call(settings, lambda s: s.prune())
    click.echo(f"removed {pruned} expired state entries from {build_location(settings)}")


@main.group()
def keys() -> None:
    """API keys for auth.enabled: create (shown once), list, revoke."""


def _rate_option(value: str | None, field: str) -> Any:
    from searcher.auth.rates import Rate

    if value is None:
        return None
    try:
        return Rate.parse(value, field)
    except InvalidRequest as exc:
        _fail(str(exc), 2)


@keys.command("create")
@click.argument("name")
@click.option(
    "--rate", default=None, help="Requests per time, e.g. 60/min (default: auth.default_rate)."
)
@click.option("--quota", default=None, help="Requests per window, e.g. 10000/day (default: none).")
@click.option(
    "--collections",
    default=None,
    help="Collections of own documents it may see, e.g. notes,papers ('*' all; default: "
    "corpus.default_access).",
)
@click.option(
    "--operator",
    is_flag=True,
    help="May also use the routes that act on the whole server (/v1/cache/stats, "
    "/v1/cache/clear); other keys get 403 there.",
)
@config_option
def keys_create(
    name: str,
    rate: str | None,
    quota: str | None,
    collections: str | None,
    operator: bool,
    config_path: tuple[str, ...],
) -> None:
    """Create a key and print it: it is shown this once, only its hash is stored."""
    from searcher.auth.access import parse_collections
    from searcher.auth.keys import KeyBook

    settings = _settings(config_path)
    limits = _rate_option(rate, "--rate"), _rate_option(quota, "--quota")
    try:
        allowed = None if collections is None else parse_collections([collections], "--collections")
        key, secret = _state_call(
            settings, lambda s: KeyBook(s).create(name, *limits, allowed, operator)
        )
    except InvalidRequest as exc:
        _fail(str(exc), 2)
    click.echo(secret)
    click.echo(
        f"created key {key.id} ({key.name}); store the key now, it is not shown again", err=True
    )
    if not settings.auth.enabled:  # else a server run with this config lets anyone in
        click.echo("note: auth.enabled is off in this configuration: the server asks for "
                   "no key until it is on (auth: {enabled: true})", err=True)  # fmt: skip


@keys.command("list")
@click.option("--json", "as_json", is_flag=True)
@config_option
def keys_list(as_json: bool, config_path: tuple[str, ...]) -> None:
    """List the keys (never their secrets)."""
    from searcher.auth.keys import KeyBook

    found = _state_call(_settings(config_path), lambda s: KeyBook(s).list())
    if as_json:
        click.echo(json.dumps([k.public() for k in found], indent=2))
        return
    for key in found:
        state = "revoked" if key.revoked else "active"
        limits = f"rate {key.rate or 'default'}, quota {key.quota or 'none'}"
        seen = ",".join(key.collections) if key.collections is not None else "default"
        click.echo(
            f"{key.id}  {key.name:<20} {state:<8} {limits}, collections {seen}"
            f"{', operator' if key.operator else ''}  created {key.created_utc}"
        )


@keys.command("revoke")
@click.argument("name_or_id")
@config_option
def keys_revoke(name_or_id: str, config_path: tuple[str, ...]) -> None:
    """Revoke a key by name or id; it is refused from then on (within seconds)."""
    from searcher.auth.keys import KeyBook
    from searcher.errors import InvalidRequest, KeyNotFound

    try:
        key = _state_call(_settings(config_path), lambda s: KeyBook(s).revoke(name_or_id))
    except KeyNotFound as exc:
        _fail(str(exc), 1)
    except InvalidRequest as exc:  # a name one key has and another's id
        _fail(f"{exc.message}: revoke it by its id", 2)
    click.echo(f"revoked key {key.id} ({key.name})")


@main.command("usage")
@click.option("--json", "as_json", is_flag=True)
@config_option
def usage(as_json: bool, config_path: tuple[str, ...]) -> None:
    """Requests per key today."""
    import time

    from searcher.api.auth import read_counter, usage_counter
    from searcher.auth.keys import KeyBook

    now = time.time()

    async def read(store: Any) -> list[dict[str, Any]]:
        rows = []
        for key in await KeyBook(store).list():
            used = await read_counter(store, usage_counter(key, now))
            rows.append({**key.public(), "requests_today": used})
        return rows

    rows = _state_call(_settings(config_path), read)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        click.echo(f"{row['id']}  {row['name']:<20} {row['requests_today']:>8} requests today")


def build_location(settings: Settings) -> str:
    from searcher.state import store_location

    return store_location(settings.state)


@main.command("eval")
@click.argument("run_path", metavar="RUN")
@click.argument("qrels_path", metavar="QRELS")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.option(
    "--metrics",
    multiple=True,
    help="Metrics, comma-separated or repeated (ir-measures names, plus MRR, MAP, "
    "Recall@k). Default: MRR, nDCG@5, nDCG@10, P@5, Recall@10.",
)
def evaluate(run_path: str, qrels_path: str, fmt: str, metrics: tuple[str, ...]) -> None:
    """Score a TREC run file against TREC or BEIR qrels."""
    from searcher.ranking import evaluation

    names = [name.strip() for group in metrics for name in group.split(",") if name.strip()]
    try:
        result = evaluation.evaluate_files(
            run_path, qrels_path, names or evaluation.DEFAULT_METRICS
        )
    except evaluation.MetricsNotInstalled as exc:
        _fail(str(exc), 1)  # the input may be fine: the installation lacks the extra
    except evaluation.EvalError as exc:
        _fail(str(exc), 2)
    if fmt == "json":
        click.echo(json.dumps(evaluation.to_json(result), indent=2))
    else:
        click.echo(evaluation.format_table(result), nl=False)


def _capabilities(capabilities: Any) -> list[str]:
    """``paging``, ``max_pageno=10``: what an adapter honours, as ``searcher plugins`` says."""
    return [
        name if value is True else f"{name}={value}"
        for name, value in dataclasses.asdict(capabilities).items()
        if value is not None and value is not False
    ]


@main.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def plugins(as_json: bool) -> None:
    """List the backend adapters: built-in, installed by plugins, and plugins that failed
    to load (with the reason). Plugins register in the "searcher.backends" entry points."""
    from searcher.backends.registry import load_registry

    registry = load_registry()
    loaded = [
        {
            "adapter": name,
            "origin": registry.origins.get(name, "unknown"),
            "capabilities": _capabilities(spec.capabilities),
        }
        for name, spec in registry.specs.items()
    ]
    failed = [
        {"name": name, "origin": registry.origins.get(name, "unknown"), "reason": reason}
        for name, reason in registry.problems.items()
    ]
    if as_json:
        click.echo(json.dumps({"adapters": loaded, "failed": failed}, indent=2))
        return
    width = max(len(entry["adapter"]) for entry in loaded)
    for entry in loaded:
        capabilities = ", ".join(entry["capabilities"]) or "none"
        click.echo(f"{entry['adapter']:<{width}}  {entry['origin']}  [{capabilities}]")
    if failed:
        click.echo("failed to load:")
        for problem in failed:
            click.echo(f"{problem['name']}  {problem['origin']}: {problem['reason']}")


@main.command("config")
@config_option
def show_config(config_path: tuple[str, ...]) -> None:
    """Print the effective configuration (secrets masked)."""
    settings = _settings(config_path)
    click.echo(yaml.safe_dump(masked(settings), sort_keys=False), nl=False)


@main.command("tune")
@click.option(
    "--queries", "queries_path", default=None, help="Queries, `qid<TAB>text` lines (or --set)."
)
@click.option(
    "--set",
    "set_path",
    default=None,
    help="A frozen set (searcher freeze): its queries, searched offline from its recordings.",
)
@click.option(
    "--qrels", "qrels_path", required=True, help="TREC qrels `qid 0 url grade` (0-2 or more)."
)
@click.option("--out", "out_path", required=True, help="Where to write the YAML fragment.")
@click.option("--folds", type=click.IntRange(2, 20), default=5, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the fold split.")
@config_option
def tune_command(
    queries_path: str | None,
    set_path: str | None,
    qrels_path: str,
    out_path: str,
    folds: int,
    seed: int,
    config_path: tuple[str, ...],
) -> None:
    """Fit fusion (weights, rrf_k, hybrid share, heuristics) to judged queries by nDCG@10
    with cross-validation; write a config fragment to pass as a further --config."""
    from searcher.config import config_tree
    from searcher.pipeline.tune import report_lines, tune
    from searcher.ranking import evaluation
    from searcher.runtime import open_service

    settings = _settings(config_path)
    tree = config_tree(config_path)
    if (queries_path is None) == (set_path is None):
        _fail("give one of --queries, --set", 2)
    _check_fragment_path(out_path, config_path, queries_path, qrels_path, set_path)
    frozen = _frozen_set(set_path)
    try:
        queries = frozen.queries if frozen else evaluation.read_queries(queries_path or "")
        qrels = evaluation.read_qrels(qrels_path)
        evaluation.per_query({}, {"q": {"d": 1}})  # the eval extra, before any search
    except evaluation.MetricsNotInstalled as exc:
        _fail(str(exc), 1)
    except evaluation.EvalError as exc:
        _fail(str(exc), 2)

    async def fit() -> Any:
        async with open_service(
            settings, extract_in_process=True, sweep=False, wait_for_embedder=True
        ) as runtime:
            recorded = frozen.recordings if frozen else None
            return await tune(runtime.service.parts, tree, queries, qrels, folds, seed, recorded)

    try:
        report = _run(fit)
    except evaluation.EvalError as exc:
        _fail(str(exc), 2)
    for line in report_lines(report):
        click.echo(line)
    result = report.result
    if result.refused:
        _fail(
            f"not written: on held-out folds the tuned settings do not beat the configured "
            f"ones by more than one standard error of the per-query gains ("
            f"{result.held_tuned:.4f} against {result.held_default:.4f}, standard error "
            f"{result.held_gain_error:.4f}): the gain may be noise; more judged queries "
            "would tell",
            1,
        )
    _write_fragment(out_path, report.fragment())


def _check_fragment_path(
    out_path: str, config_path: tuple[str, ...], queries: str | None, qrels: str,
    frozen_set: str | None,
) -> None:  # fmt: skip
    """Refuse (exit 2) an ``--out`` that is a file tune reads: the fragment would replace
    the judgements, or the whole configuration (its secrets too) with a few keys."""
    from pathlib import Path

    from searcher.config import config_files

    inputs: list[tuple[str, str | None]] = [("--config", p) for p in config_files(config_path)]
    inputs += [("--queries", queries), ("--qrels", qrels), ("--set", frozen_set)]
    out = Path(out_path).resolve()
    for option, path in inputs:
        if path is not None and Path(path).resolve() == out:
            _fail(f"--out {out_path} is the {option} file tune reads: writing the fragment "
                  "there would replace it; choose another --out and pass it as a further "
                  "--config", 2)  # fmt: skip


def _frozen_set(set_path: str | None) -> Any:
    """The frozen set at ``set_path`` (None: none given); exit 2 when it is unreadable."""
    from pathlib import Path

    from searcher.recording.frozen import FrozenSetError, read_set

    if set_path is None:
        return None
    try:
        return read_set(Path(set_path))
    except FrozenSetError as exc:
        _fail(str(exc), 2)


def _write_fragment(out_path: str, tree: dict[str, Any]) -> None:
    header = "# searcher tune: fusion fitted to judgements; pass as a further --config\n"
    try:
        with open(out_path, "w", encoding="utf-8") as out:
            out.write(header + yaml.safe_dump(tree, sort_keys=True))
    except OSError as exc:
        _fail(f"cannot write {out_path}: {exc.strerror or exc}", 2)
    click.echo(f"wrote {out_path}")


@main.command("judge")
@click.option("--queries", "queries_path", default=None, help="Queries, `qid<TAB>text` lines.")
@click.option(
    "--query-log",
    "log_path",
    default=None,
    help="The access log (JSON lines, logging.queries on): its recent queries are sampled.",
)
@click.option(
    "--from-feedback",
    is_flag=True,
    help="Qrels from POST /v1/feedback (cited 2, used 1, not_relevant 0), no LLM.",
)
@click.option(
    "--set",
    "set_path",
    default=None,
    help="A frozen set (searcher freeze): its queries, pooled from its recorded backend "
    "answers without searching (only the LLM is asked); the qrels `tune --set` reads.",
)
@click.option(
    "--out", "out_path", required=True, help="Qrels file to write; the queries go beside it (.tsv)."
)
@click.option("--sample", type=click.IntRange(1), default=None,
              help="Queries judged at most (--queries, --query-log).")  # fmt: skip
@click.option("--depth", type=click.IntRange(1, 50), default=None,
              help="Results of each backend pooled per query (default 10; not with "
              "--from-feedback).")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample.")
@config_option
def judge_command(
    queries_path: str | None,
    log_path: str | None,
    from_feedback: bool,
    set_path: str | None,
    out_path: str,
    sample: int | None,
    depth: int | None,
    seed: int,
    config_path: tuple[str, ...],
) -> None:
    """Write qrels for `searcher tune`: the configured LLM grades (0-2) the pooled top
    results of every backend (searched, or recorded in a frozen set), or feedback
    reported by agents becomes judgements."""
    from searcher.pipeline.judge import POOL_DEPTH, check_query_ids
    from searcher.ranking import evaluation

    if sum(bool(x) for x in (queries_path, log_path, from_feedback, set_path)) != 1:
        _fail("give exactly one of --queries, --query-log, --from-feedback, --set", 2)
    # Options the source chosen does not read are refused, not ignored.
    if sample is not None and (from_feedback or set_path):
        _fail("--sample applies to --queries and --query-log only", 2)
    if depth is not None and from_feedback:
        _fail("--depth applies to the LLM's judgements, not to --from-feedback", 2)
    depth = depth or POOL_DEPTH
    inputs = {"--queries": queries_path, "--query-log": log_path, "--set": set_path}
    _check_judgement_paths(out_path, config_path, inputs)
    settings = _settings(config_path)
    if from_feedback:
        queries, qrels = _state_call(settings, lambda store: _feedback_qrels(settings, store))
        if not qrels:
            _fail("no feedback is recorded (feedback.enabled, then POST /v1/feedback)", 2)
    else:
        if not settings.llm.configured:
            _fail("no LLM configured: set llm.base_url and llm.model (or use --from-feedback)", 2)
        frozen = _frozen_set(set_path)
        try:
            queries = (
                frozen.queries if frozen else _judge_input(queries_path, log_path, sample, seed)
            )
            check_query_ids(queries, set_path or queries_path or log_path or "")
        except evaluation.EvalError as exc:
            _fail(str(exc), 2)
        recorded = frozen.recordings if frozen else None
        qrels = _run(lambda: _llm_qrels(settings, queries, depth, recorded))
    _write_judgements(out_path, queries, qrels)


def _judge_input(
    queries_path: str | None, log_path: str | None, sample: int | None, seed: int
) -> dict[str, str]:
    import random

    from searcher.pipeline.judge import queries_from_log
    from searcher.ranking import evaluation

    if log_path is not None:
        try:
            with open(log_path, encoding="utf-8", errors="replace") as log:
                return queries_from_log(log, log_path, sample or 50, seed)
        except OSError as exc:
            raise evaluation.EvalError(f"{log_path}: cannot read ({exc.strerror})") from None
    queries = evaluation.read_queries(queries_path or "")
    if sample is not None and sample < len(queries):
        chosen = sorted(random.Random(seed).sample(sorted(queries), sample))
        queries = {q: queries[q] for q in chosen}
    return queries


async def _feedback_qrels(settings: Settings, store: Any) -> tuple[dict[str, str], Any]:
    from searcher.feedback.book import FeedbackBook, feedback_qrels

    return feedback_qrels(await FeedbackBook(store, settings.feedback).records())


async def _llm_qrels(
    settings: Settings, queries: dict[str, str], depth: int, recorded: Any = None
) -> Any:
    from searcher.llm.judge import JudgementCache
    from searcher.pipeline.judge import judge_queries
    from searcher.runtime import open_service

    cache = JudgementCache(settings.state.directory(), settings.llm.model or "")

    def progress(done: int, total: int, qid: str) -> None:
        click.echo(f"judged {qid} ({done}/{total})", err=True)

    async with open_service(settings, extract_in_process=True, sweep=False) as runtime:
        parts = runtime.service.parts
        judged = await judge_queries(parts, queries, cache, depth, recorded, progress)
    click.echo(
        f"{len(judged.qrels)} queries judged: {judged.asked} grades asked of the LLM, "
        f"{judged.cached} from the cache, {len(judged.failed)} unjudged (no reply, or one "
        "outside the contract)"
        + (f", {len(judged.unanswered)} queries without results" if judged.unanswered else ""),
        err=True,
    )
    for problem in judged.failed[:5]:
        click.echo(f"  unjudged: {problem}", err=True)
    if judged.stopped:
        _fail(f"judging stopped: {judged.stopped}; the grades made are cached: run it "
              "again once the LLM answers", 1)  # fmt: skip
    if not judged.qrels:
        _fail("no judgement was made (see above)", 1)
    return judged.qrels


def _check_judgement_paths(
    out_path: str, config_path: tuple[str, ...], inputs: dict[str, str | None]
) -> None:
    """Refuse (exit 2) an ``--out`` whose qrels, or queries file (beside it, ``.tsv``),
    would overwrite a file judge reads (``inputs``: option -> path; the config files
    too): judge writes only what it judged."""
    from pathlib import Path

    from searcher.config import config_files

    out = Path(out_path)
    beside = out.with_suffix(".tsv")
    if beside == out:
        _fail(f"--out {out_path}: the queries are written beside it as {beside}; "
              "give the qrels another suffix (e.g. .qrels)", 2)  # fmt: skip
    read = [("--config", p) for p in config_files(config_path)] + list(inputs.items())
    for option, path in read:
        if path is None:
            continue
        for written, what in ((out, "qrels"), (beside, "queries")):
            if written.resolve() == Path(path).resolve():
                _fail(f"--out {out_path} would write its {what} over {option} {path} "
                      f"({written}); choose another --out", 2)  # fmt: skip


def _write_judgements(out_path: str, queries: dict[str, str], qrels: Any) -> None:
    from pathlib import Path

    from searcher.ranking.evaluation import format_qrels, format_queries

    out = Path(out_path)
    beside = out.with_suffix(".tsv")
    try:
        out.write_text(format_qrels(qrels), encoding="utf-8")
        beside.write_text(format_queries(queries, sorted(qrels)), "utf-8")
    except OSError as exc:
        _fail(f"cannot write {out_path}: {exc.strerror or exc}", 2)
    click.echo(f"wrote {out} and {beside} ({len(qrels)} queries)")


if __name__ == "__main__":
    main()
