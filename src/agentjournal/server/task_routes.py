"""Task routes: queue work in a session, list it, and the worker's side (claim, progress,
complete, fail, cancel). Each route is one journal verb for the caller's tenant."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from agentjournal.server.models import (
    CancelRequest,
    ClaimRequest,
    CompleteRequest,
    CreateTask,
    FailRequest,
    ProgressRequest,
    TaskOut,
    TaskPage,
)
from agentjournal.server.routing import (
    ERROR_RESPONSES,
    IdempotencyKey,
    Tenant,
    created_response,
    journal_for,
    repeat_doc,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES, tags=["tasks"])
TaskStatus = Literal["pending", "running", "completed", "failed", "cancelled", "open"]
_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"


def _page(tasks: list[TaskOut], limit: int) -> TaskPage:
    return TaskPage(tasks=tasks, next_after=tasks[-1].task_id if len(tasks) == limit else None)


@router.post(
    "/sessions/{session_id}/tasks",
    status_code=201,
    response_model=TaskOut,
    responses=repeat_doc(TaskOut),
)
async def create_task(
    request: Request,
    session_id: str,
    body: CreateTask,
    tenant: Tenant,
    key: IdempotencyKey = None,
) -> JSONResponse:
    """Queue a task in the session (201; a repeated Idempotency-Key answers 200)."""
    task, created = await journal_for(request, tenant).create_task_ex(
        session_id,
        body.type,
        body.input,
        parent_task_id=body.parent_task_id,
        max_retries=body.max_retries,
        idempotency_key=key,
    )
    return created_response(TaskOut.of(task), created)


@router.get("/sessions/{session_id}/tasks")
async def session_tasks(
    request: Request,
    session_id: str,
    tenant: Tenant,
    status: TaskStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: Annotated[str | None, Query(pattern=_ID)] = None,
) -> TaskPage:
    """The session's tasks in queue order."""
    journal = journal_for(request, tenant)
    await journal.get_session(session_id)  # 404 for a missing session, not an empty page
    found = await journal.tasks(status=status, session_id=session_id, limit=limit, after=after)
    return _page([TaskOut.of(t) for t in found], limit)


@router.get("/tasks")
async def list_tasks(
    request: Request,
    tenant: Tenant,
    status: TaskStatus | None = None,
    type: Annotated[str | None, Query(pattern=_ID)] = None,
    session_id: Annotated[str | None, Query(pattern=_ID)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: Annotated[str | None, Query(pattern=_ID)] = None,
) -> TaskPage:
    """The tenant's tasks in queue order; `status=open` means pending or running."""
    found = await journal_for(request, tenant).tasks(
        status=status, type=type, session_id=session_id, limit=limit, after=after
    )
    return _page([TaskOut.of(t) for t in found], limit)


@router.post(
    "/tasks/claim",
    response_model=TaskOut,
    responses={204: {"description": "no pending task of those types"}},
)
async def claim_task(request: Request, body: ClaimRequest, tenant: Tenant) -> Response:
    """Take the oldest pending task (of `types`) under a lease: 200 with it, 204 if none."""
    task = await journal_for(request, tenant).claim_task(
        body.worker, body.types, body.lease_seconds
    )
    if task is None:
        return Response(status_code=204)
    return JSONResponse(TaskOut.of(task).model_dump(mode="json"))


@router.get("/tasks/{task_id}")
async def get_task(request: Request, task_id: str, tenant: Tenant) -> TaskOut:
    return TaskOut.of(await journal_for(request, tenant).get_task(task_id))


@router.post("/tasks/{task_id}/progress")
async def task_progress(
    request: Request, task_id: str, body: ProgressRequest, tenant: Tenant
) -> TaskOut:
    """Report the attempt's progress and renew its lease (409 if the attempt is over)."""
    task = await journal_for(request, tenant).task_progress(
        task_id, body.progress, attempt=body.attempt, message=body.message
    )
    return TaskOut.of(task)


@router.post("/tasks/{task_id}/complete")
async def complete_task(
    request: Request, task_id: str, body: CompleteRequest, tenant: Tenant
) -> TaskOut:
    task = await journal_for(request, tenant).complete_task(
        task_id, attempt=body.attempt, output=body.output
    )
    return TaskOut.of(task)


@router.post("/tasks/{task_id}/fail")
async def fail_task(request: Request, task_id: str, body: FailRequest, tenant: Tenant) -> TaskOut:
    """Fail the attempt: back to pending while retries remain (if retryable), else failed."""
    task = await journal_for(request, tenant).fail_task(
        task_id, attempt=body.attempt, error=body.error, retryable=body.retryable
    )
    return TaskOut.of(task)


@router.post("/tasks/{task_id}/cancel")
async def cancel_task(
    request: Request, task_id: str, body: CancelRequest, tenant: Tenant
) -> TaskOut:
    """Cancel a pending or running task and its open sub-tasks."""
    return TaskOut.of(await journal_for(request, tenant).cancel_task(task_id, reason=body.reason))
