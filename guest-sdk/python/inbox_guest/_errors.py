"""The error a handler raises to fail its message on purpose."""


class HandlerError(Exception):
    """Fails the message: its transaction is rolled back.

    ``retryable=True`` says that delivering the message again can succeed (a
    resource that is briefly unavailable); the default, ``False``, says it
    cannot (a payload the handler rejects), so the host sets the message aside
    after a few attempts.
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.message = str(message)
        self.retryable = bool(retryable)

    def __repr__(self) -> str:
        return f"HandlerError({self.message!r}, retryable={self.retryable})"
