"""The WhatsApp connector: verify and take notifications in, send replies out.

`GET /webhooks/whatsapp` answers Meta's subscription check; `POST` carries messages
and delivery statuses, signed over the raw body. A notification is acknowledged only
once every message in it is committed. Replies go out as text of at most 4096
characters, and only within 24 hours of the message they answer: later, WhatsApp
accepts approved templates only, so the reply is marked undeliverable with that reason.
"""

# No `from __future__ import annotations`: FastAPI must evaluate the route signatures.

import hmac
from collections.abc import Sequence
from datetime import timedelta
from typing import Annotated, Any, Protocol

import httpx
import structlog
from fastapi import APIRouter, Header, HTTPException, Query, Request, Response, status
from fastapi.responses import PlainTextResponse

from connectors.whatsapp import signature
from connectors.whatsapp.graph import WINDOW_REASON, GraphClient, WindowClosed
from connectors.whatsapp.normalize import CHANNEL, Notification, parse
from gateway.sdk import (
    NO_SOCKETS,
    AccessRefused,
    Capabilities,
    ChatRef,
    Clocked,
    Finding,
    Inbound,
    InputError,
    MalformedJSON,
    Outbound,
    Pace,
    Receipts,
    Receiving,
    Undeliverable,
    WhatsAppSettings,
    load_platform_json,
    utf16_length,
)

log = structlog.get_logger(__name__)

WEBHOOK_PATH = "/webhooks/whatsapp"
MAX_CHARS = 4096
WINDOW = timedelta(hours=24)
# 80 messages a second per business number by default, inbound and outbound together.
NUMBER_INTERVAL = 1 / 80
TEMPLATE_PARAMETER = 1024


class WhatsAppCore(Receiving, Receipts, Clocked, Protocol):
    """The roles of the core this connector uses: messages in, delivery statuses, and
    the clock that says whether a reply is still inside WhatsApp's 24-hour window."""


def create(settings: WhatsAppSettings) -> "WhatsAppConnector":
    return WhatsAppConnector(settings)


class WhatsAppConnector:
    channel = CHANNEL

    core: WhatsAppCore  # given by start()

    def __init__(self, settings: WhatsAppSettings) -> None:
        self.settings = settings
        self.capabilities = Capabilities(
            max_length=MAX_CHARS,
            measure=utf16_length,
            # The typing indicator shows for up to 25 seconds.
            typing_interval=20.0,
            free_text_window=WINDOW,
            reminders_past_window=settings.reminder_template is not None,
        )
        self._app_secret = settings.app_secret.get_secret_value().encode()
        self._phone_number_id = settings.phone_number_id
        self.graph = GraphClient(
            api_url=settings.api_url,
            phone_number_id=settings.phone_number_id,
            token=settings.token.get_secret_value(),
        )
        self.router = _router(self)
        self.sockets = NO_SOCKETS

    async def start(self, core: WhatsAppCore) -> None:
        self.core = core
        await self.graph.open()

    async def stop(self) -> None:
        await self.graph.close()

    async def fetch_file(self, ref: str, limit: int) -> bytes:
        return await self.graph.media(ref, limit)

    # -- intake -----------------------------------------------------------------------

    async def diagnose(self) -> list[Finding]:
        number = self.settings.phone_number_id
        headers = {"Authorization": f"Bearer {self.settings.token.get_secret_value()}"}
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                found = await http.get(
                    f"{self.settings.api_url.rstrip('/')}/{number}",
                    params={"fields": "display_phone_number,verified_name"},
                    headers=headers,
                )
                webhook = await self._check_webhook(http)
        except httpx.HTTPError as exc:
            return [
                Finding(
                    "WhatsApp number",
                    False,
                    f"the Graph API did not answer ({type(exc).__name__}): check "
                    "PARLEY_WHATSAPP_API_URL and the network",
                )
            ]
        if found.is_success:
            shown = found.json().get("display_phone_number") or number
            return [Finding("WhatsApp number", True, str(shown)), webhook]
        message = _graph_message(found)
        if found.status_code == 401 or "OAuth" in message:
            detail = f"PARLEY_WHATSAPP_TOKEN: Meta rejected the access token ({message})"
        else:
            detail = f"PARLEY_WHATSAPP_PHONE_NUMBER_ID {number}: Meta answered {message}"
        return [Finding("WhatsApp number", False, detail), webhook]

    async def _check_webhook(self, http: httpx.AsyncClient) -> Finding:
        """Ask our own public address what Meta asks when the webhook is set up."""
        name = "WhatsApp webhook"
        if not self.settings.public_url:
            return Finding(
                name,
                False,
                "PARLEY_PUBLIC_URL is unset: Meta must reach this gateway at "
                f"{{PARLEY_PUBLIC_URL}}{WEBHOOK_PATH} over HTTPS",
            )
        url = self.settings.public_url.rstrip("/") + WEBHOOK_PATH
        challenge = "parley-doctor"
        params = {
            "hub.mode": "subscribe",
            "hub.verify_token": self.settings.verify_token.get_secret_value(),
            "hub.challenge": challenge,
        }
        try:
            answer = await http.get(url, params=params)
        except httpx.HTTPError as exc:
            return Finding(
                name,
                False,
                f"{url} did not answer ({type(exc).__name__}): is `parley serve` running "
                "and reachable there?",
            )
        if answer.status_code != 200 or answer.text != challenge:
            return Finding(
                name,
                False,
                f"{url} answered {answer.status_code} to the verification: is it this "
                "gateway, with this PARLEY_WHATSAPP_VERIFY_TOKEN?",
            )
        return Finding(name, True, f"{url} answers Meta's verification")

    def verify_subscription(self, mode: str, token: str) -> bool:
        expected = self.settings.verify_token
        if mode != "subscribe":
            return False
        return hmac.compare_digest(token.encode(), expected.get_secret_value().encode())

    def parse(self, body: bytes, signed: str | None) -> Notification:
        try:
            signature.verify(self._app_secret, body, signed)
        except signature.MissingSignature as exc:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, str(exc)) from None
        except signature.BadSignature as exc:
            raise HTTPException(status.HTTP_403_FORBIDDEN, str(exc)) from None
        try:
            parsed = load_platform_json(body)
        except MalformedJSON as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
        if not isinstance(parsed.data, dict):
            raise HTTPException(status.HTTP_400_BAD_REQUEST, "body is not a JSON object")
        if parsed.nulled_numbers:
            # Read leniently, a message whose id or sender became null is skipped and
            # the rest stored: WhatsApp would only send the same numbers again.
            log.info(
                "read numbers no column holds in a WhatsApp notification as null",
                numbers=parsed.nulled_numbers,
            )
        return parse(parsed.data, self._phone_number_id)

    async def handle(self, notification: Notification) -> None:
        """Commit every message and receipt; returns once they are stored."""
        for inbound in notification.messages:
            await self._take(inbound)
        for receipt in notification.receipts:
            known = await self.core.receipt(
                CHANNEL, receipt.platform_id, receipt.status, receipt.error
            )
            if not known:
                log.debug("receipt for a message Parley did not send", status=receipt.status)

    async def _take(self, inbound: Inbound) -> None:
        try:
            await self.core.receive(inbound)
        except AccessRefused:
            pass  # the core has answered the person
        except InputError as exc:
            # One unstorable message (an id longer than any real one) must not make
            # WhatsApp retry the rest of its batch for days.
            log.warning("skipped a WhatsApp message Parley cannot store", error=str(exc))

    # -- output -----------------------------------------------------------------------

    def measure(self, text: str) -> int:
        return utf16_length(text)

    def pacing(self, outbound: Outbound) -> Sequence[Pace]:
        return (Pace((CHANNEL, self._phone_number_id), NUMBER_INTERVAL),)

    async def send(self, outbound: Outbound) -> str | None:
        sent_at = outbound.reply_to_sent_at
        closed = sent_at is not None and self.core.clock.now() - sent_at > WINDOW
        template = self.settings.reminder_template if outbound.reminder else None
        if closed and template is None:
            raise Undeliverable(WINDOW_REASON)
        try:
            # WhatsApp has the last word on its window: free text it refuses goes
            # out as the template, if this is a reminder and one is set.
            if closed:
                raise WindowClosed(WINDOW_REASON)
            answer = await self.graph.post(_text_body(outbound.external_user_id, outbound.text))
        except WindowClosed:
            if template is None:
                raise
            body = _template_body(outbound.external_user_id, template, outbound.text)
            answer = await self.graph.post(body)
        messages = answer.get("messages")
        if isinstance(messages, list) and messages and isinstance(messages[0], dict):
            wamid = messages[0].get("id")
            if isinstance(wamid, str):
                return wamid
        return None

    async def notify(self, chat: ChatRef, text: str) -> None:
        await self.graph.post(_text_body(chat.external_user_id, text))

    async def typing(self, chat: ChatRef) -> None:
        """Mark the message being answered as read, with a typing indicator."""
        if chat.platform_message_id is None:
            return
        await self.graph.post(
            {
                "messaging_product": "whatsapp",
                "status": "read",
                "message_id": chat.platform_message_id,
                "typing_indicator": {"type": "text"},
            }
        )


def _text_body(to: str, text: str) -> dict[str, Any]:
    return {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": to,
        "type": "text",
        "text": {"preview_url": False, "body": text},
    }


def _template_body(to: str, template: tuple[str, str], text: str) -> dict[str, Any]:
    name, language = template
    return {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": to,
        "type": "template",
        "template": {
            "name": name,
            "language": {"code": language},
            # One line (WhatsApp refuses line breaks and tabs in a parameter), cut to
            # the 1,024 characters a template's body holds.
            "components": [
                {
                    "type": "body",
                    "parameters": [
                        {"type": "text", "text": " ".join(text.split())[:TEMPLATE_PARAMETER]}
                    ],
                }
            ],
        },
    }


def _router(connector: WhatsAppConnector) -> APIRouter:
    router = APIRouter(tags=["whatsapp"])

    @router.get(WEBHOOK_PATH, include_in_schema=False)
    async def verify(
        mode: Annotated[str, Query(alias="hub.mode")] = "",
        token: Annotated[str, Query(alias="hub.verify_token")] = "",
        challenge: Annotated[str, Query(alias="hub.challenge")] = "",
    ) -> Response:
        if not connector.verify_subscription(mode, token):
            raise HTTPException(status.HTTP_403_FORBIDDEN, "verification failed")
        return PlainTextResponse(challenge)

    @router.post(WEBHOOK_PATH, include_in_schema=False)
    async def notify(
        request: Request,
        signed: Annotated[str | None, Header(alias=signature.HEADER)] = None,
    ) -> Response:
        notification = connector.parse(await request.body(), signed)
        await connector.handle(notification)
        return Response(status_code=status.HTTP_200_OK)

    return router


def _graph_message(response: httpx.Response) -> str:
    """The Graph API's own words for a refusal (never the token: it is not in them)."""
    try:
        error = response.json().get("error") or {}
    except ValueError:
        return f"{response.status_code}"
    return f"{response.status_code}: {error.get('message', 'no message')}"
