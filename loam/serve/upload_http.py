"""Reading a multipart package upload from an HTTP request (`loam.serve.upload` checks and writes it)."""

from __future__ import annotations

from starlette.datastructures import UploadFile
from starlette.requests import Request as HttpRequest

from loam.serve.scheduler import ServeError
from loam.serve.upload import MAX_FILE, MAX_FILES, MAX_UPLOAD, PLAIN_NAME, Upload


def is_multipart(request: HttpRequest) -> bool:
    return request.headers.get("content-type", "").lower().startswith("multipart/form-data")


async def read_upload(request: HttpRequest) -> Upload:
    """The files and fields of a multipart request, each bounded (a 4xx naming the part otherwise)."""
    length = request.headers.get("content-length")
    if length is None or not length.isdigit():
        raise ServeError("a multipart upload must give its Content-Length", status=411)
    if int(length) > MAX_UPLOAD:
        raise ServeError(f"the upload is {length} bytes, over the {MAX_UPLOAD} a package upload may be", status=413)
    try:
        form = await request.form(max_files=MAX_FILES, max_fields=8)
    except Exception as err:  # Starlette's parser refuses a malformed body or too many parts
        raise ServeError(f"the multipart body cannot be read: {err}", param="files") from None
    files: dict[str, bytes] = {}
    active = True
    try:
        for field, value in form.multi_items():
            if isinstance(value, UploadFile):
                name = value.filename or ""
                if not PLAIN_NAME.fullmatch(name):
                    raise ServeError(
                        f"file part {field!r} is named {name!r}: give a plain file name (letters, digits, ._-, "
                        "no path separator, not starting with a dot)",
                        param=f"files.{name or field}",
                    )
                if name in files:
                    raise ServeError(f"the upload carries {name!r} twice", param=f"files.{name}")
                data = await value.read(MAX_FILE + 1)
                if len(data) > MAX_FILE:
                    raise ServeError(
                        f"file {name!r} is over the {MAX_FILE} bytes an uploaded file may hold", status=413,
                        param=f"files.{name}",
                    )  # fmt: skip
                files[name] = data
            elif field == "active":
                if value not in ("true", "false"):
                    raise ServeError(f"'active' must be true or false, got {value!r}", param="active")
                active = value == "true"
            else:
                raise ServeError(f"unknown form field {field!r} (an upload carries files and 'active')", param=field)
    finally:
        await form.close()
    return Upload(files, active)
