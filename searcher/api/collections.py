"""Collections of own documents over HTTP: ``GET /v1/collections`` (those the caller's
key may see, with counts), ``POST /v1/collections/{name}/documents`` (files uploaded as
multipart and indexed; ``corpus.uploads``) and ``DELETE
/v1/collections/{name}/documents/{document}`` (an uploaded file dropped).

Uploads are off unless ``corpus.uploads.enabled``, which needs ``auth.enabled``: a key
uploads to and deletes from only the collections it may see. The body's size limit is
``corpus.uploads.max_bytes`` (``BodyLimitMiddleware`` answers 413 above it)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from fastapi import APIRouter, Request
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from searcher.api.auth import collection_access
from searcher.api.body_limit import BODY_CUT, RouteLimit
from searcher.auth.access import CollectionAccess
from searcher.config import Settings
from searcher.contract import (
    CollectionInfo,
    CollectionList,
    ErrorResponse,
    Removed,
    UploadAnswer,
    UploadedFile,
)
from searcher.corpus import operations, store, uploads
from searcher.corpus.indexer import IndexOptions
from searcher.embedding.embedders import Embedder
from searcher.embedding.off_loop import indexing_embedder
from searcher.errors import (
    AccessDenied,
    DocumentNotFound,
    EmbedderUnavailable,
    InvalidRequest,
    UploadsOff,
)
from searcher.runtime import Runtime

router = APIRouter()
DOCUMENTS_PATH = "/v1/collections/{name}/documents"


def upload_limit(settings: Settings) -> RouteLimit:
    """The upload route's own body limit, for ``BodyLimitMiddleware``."""
    return RouteLimit(
        "POST",
        re.compile(r"/v1/collections/[^/]+/documents"),
        settings.corpus.uploads.max_bytes,
        "corpus.uploads.max_bytes",
    )


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _checked_collection(name: str, access: CollectionAccess) -> str:
    try:
        store.check_collection_name(name)
    except ValueError as exc:
        raise InvalidRequest("name", str(exc)) from None
    if not access.allows(name):
        raise AccessDenied("name", f"this API key may not use collection {name!r}")
    return name


def _uploads_allowed(request: Request, name: str) -> tuple[Settings, str]:
    settings = _runtime(request).settings
    if not settings.corpus.uploads.enabled:
        raise UploadsOff()
    return settings, _checked_collection(name, collection_access(request.scope))


@router.get(
    "/v1/collections",
    response_model=CollectionList,
    summary="The collections of own documents this API key may see, with their counts",
)
async def list_collections(request: Request) -> CollectionList:
    access = collection_access(request.scope)
    found = await asyncio.to_thread(operations.status, _runtime(request).settings)
    return CollectionList(
        collections=[
            CollectionInfo(
                name=c.name, documents=len(c.documents), chunks=c.chunks, bytes=c.bytes,
                skipped=len(c.skipped), embedder=c.embedder,
            )
            for c in found
            if access.allows(c.name)
        ]
    )  # fmt: skip


_UPLOAD_ERRORS: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorResponse, "description": "Uploads off, or the key may not use it."},
    404: {"model": ErrorResponse, "description": "No such route (a name with a `/`)."},
    413: {"model": ErrorResponse, "description": "Body over corpus.uploads.max_bytes."},
    422: {"model": ErrorResponse, "description": "A bad name or file; `error.field`."},
    503: {"model": ErrorResponse, "description": "The embedder is not loaded yet."},
}


@router.post(
    DOCUMENTS_PATH,
    response_model=UploadAnswer,
    responses=_UPLOAD_ERRORS,
    summary="Upload files (multipart/form-data) into a collection and index them",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["files"],
                        "properties": {
                            "files": {
                                "type": "array",
                                "items": {"type": "string", "format": "binary"},
                            }
                        },
                    }
                }
            },
        }
    },
)
async def upload_documents(name: str, request: Request) -> UploadAnswer:
    settings, collection = _uploads_allowed(request, name)
    files = await _received_files(request, settings.corpus.uploads.max_files)
    if request.scope.get("state", {}).get(BODY_CUT):
        # Over the limit: nothing is kept (the middleware answers 413 in our stead).
        raise InvalidRequest("body", "over corpus.uploads.max_bytes")
    runtime = _runtime(request)
    embedder = runtime.embedder
    if embedder is None and settings.embeddings.provider != "none":
        # Indexing without vectors would rebuild a collection indexed with them.
        problem = runtime.embedder_problem or "the embedder is still loading"
        raise EmbedderUnavailable(f"cannot index uploads now: {problem}; retry shortly")
    corpus = settings.corpus
    options = IndexOptions(collection, corpus.max_file_bytes, corpus.chunk_chars, off_loop=True)
    folder = uploads.collection_folder(corpus.directory(settings.state), collection)
    async with _lock(request):  # one upload indexes at a time: the store has one writer
        index = operations.open_store(settings)
        try:
            results = await uploads.index_uploads(
                index, folder, files, options, _indexing_embedder(request, embedder),
                runtime.service.parts.reader.extractor,
            )  # fmt: skip
        except uploads.BadUploadName as exc:  # a link planted in the upload folder
            raise InvalidRequest("files", str(exc)) from None
        finally:
            index.close()
    return UploadAnswer(
        collection=collection,
        files=[UploadedFile(name=r.name, status=r.status, reason=r.reason, detail=r.detail)
               for r in results],
    )  # fmt: skip


def _indexing_embedder(request: Request, embedder: Embedder | None) -> Embedder | None:
    """The server's embedder as uploads use it (``off_loop``), made once per embedder."""
    held: tuple[Embedder | None, Embedder | None] | None = getattr(
        request.app.state, "indexing_embedder", None
    )
    if held is None or held[0] is not embedder:
        held = request.app.state.indexing_embedder = (embedder, indexing_embedder(embedder))
    return held[1]


def _lock(request: Request) -> asyncio.Lock:
    lock: asyncio.Lock | None = getattr(request.app.state, "upload_lock", None)
    if lock is None:
        lock = request.app.state.upload_lock = asyncio.Lock()
    return lock


async def _received_files(request: Request, max_files: int) -> list[tuple[str, bytes]]:
    """The files of the multipart body, each with its checked name (422 naming the part
    for a bad one; nothing is kept until every name is good)."""
    try:
        form = await request.form(max_files=max_files, max_fields=max_files)
    except StarletteHTTPException as exc:  # malformed multipart, too many files or fields
        raise InvalidRequest("files", str(exc.detail)) from None
    try:
        return await _named_files(form)
    finally:
        await form.close()  # the parts spooled to temporary files


async def _named_files(form: FormData) -> list[tuple[str, bytes]]:
    parts = [v for _, v in form.multi_items() if isinstance(v, UploadFile)]
    if not parts:
        raise InvalidRequest(
            "files", "send one or more files as multipart/form-data (e.g. curl -F files=@a.md)"
        )
    files = []
    named: dict[str, int] = {}  # the name each file is kept under -> its part's index
    for index, part in enumerate(parts):
        try:
            kept = uploads.upload_name(part.filename or "")
        except uploads.BadUploadName as exc:
            raise InvalidRequest(f"files[{index}].filename", str(exc)) from None
        if kept in named:  # one would replace the other, and the answer list one of them
            raise InvalidRequest(
                f"files[{index}].filename", f"{kept!r} is also files[{named[kept]}]'s name"
            )
        named[kept] = index
        files.append((kept, await part.read()))
    return files


@router.delete(
    DOCUMENTS_PATH + "/{document:path}",
    response_model=Removed,
    responses={
        403: _UPLOAD_ERRORS[403],
        404: {"model": ErrorResponse, "description": "No such uploaded document."},
        503: _UPLOAD_ERRORS[503],
        422: _UPLOAD_ERRORS[422],
    },
    summary="Drop an uploaded document from the collection (index and disk)",
)
async def delete_document(name: str, document: str, request: Request) -> Removed:
    settings, collection = _uploads_allowed(request, name)
    try:
        kept = uploads.upload_name(document)
    except uploads.BadUploadName as exc:
        raise InvalidRequest("document", str(exc)) from None
    folder = uploads.collection_folder(settings.corpus.directory(settings.state), collection)
    async with _lock(request):
        index = operations.open_store(settings)
        try:
            removed = await asyncio.to_thread(
                uploads.remove_upload, index, folder, collection, kept
            )
        except uploads.BadUploadName as exc:
            raise InvalidRequest("document", str(exc)) from None
        finally:
            index.close()
    if not removed:
        raise DocumentNotFound(f"no uploaded document {kept!r} in collection {collection!r}")
    return Removed(collection=collection, name=kept, removed=True)
