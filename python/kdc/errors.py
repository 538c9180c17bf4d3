"""kdc.KdcError: an error of the C core, with its located message."""


class KdcError(Exception):
    """An error of kdc's C core (or a bad argument found before it).

    ``message`` is the core's one-line located message, the text the ``kdc``
    command line prints after ``kdc: error:``; ``code`` the name of its
    kdc_code (kdc_code_name: "invalid input", "unsupported", "i/o error",
    "out of memory", "unavailable", "internal error").
    """

    def __init__(self, message, code="invalid input"):
        super().__init__(message)
        self.message = message
        self.code = code
