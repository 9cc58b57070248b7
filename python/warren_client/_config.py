"""Where the server is and how to authenticate: the parameters, then the variables `warren` reads."""

import base64
import os
import urllib.parse

__all__ = ["DEFAULT_SERVER", "Endpoint", "resolve_server", "resolve_token", "redact"]

# The server `warren submit` and the other client commands talk to when
# nothing says otherwise (cmd/warren: "http://" + server.DefaultListen).
DEFAULT_SERVER = "http://127.0.0.1:8080"


def _env(name):
    # As the warren command: a variable set to the empty string is not set.
    return os.environ.get(name, "").strip() or None


def resolve_server(base_url):
    """The server's base URL and what gave it: the parameter, WARREN_SERVER, WARREN_LISTEN, else the default."""
    if base_url is not None:
        return base_url, "base_url"
    if _env("WARREN_SERVER"):
        return _env("WARREN_SERVER"), "WARREN_SERVER"
    listen = _from_listen(_env("WARREN_LISTEN"))
    if listen:
        return listen, "WARREN_LISTEN"
    return DEFAULT_SERVER, "the default"


def _from_listen(listen):
    # A shell set up for `warren server`: http:// and its address, a
    # wildcard host read as loopback (cmd/warren's serverFromListen).
    if not listen:
        return None
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return "http://%s:%s" % ("[%s]" % host if ":" in host else host, port)


def resolve_token(token):
    """The bearer token: the parameter, WARREN_TOKEN, else the first of WARREN_API_TOKENS; None for none."""
    if token is not None:
        return token or None
    if _env("WARREN_TOKEN"):
        return _env("WARREN_TOKEN")
    tokens = _env("WARREN_API_TOKENS")
    if tokens:
        # "token:scope[+scope],...": a token may hold ':', its scopes follow the last.
        first = tokens.split(",")[0].strip()
        value, sep, _ = first.rpartition(":")
        if sep and value:
            return value
    return None


def redact(url):
    """url without its password: user:xxxxx@host, as Go's URL.Redacted shows it."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "(unparsable URL)"
    if parts.password is None:
        return url
    user, _, host = parts.netloc.rpartition("@")
    name = user.partition(":")[0]
    return urllib.parse.urlunsplit(parts._replace(netloc="%s:xxxxx@%s" % (name, host)))


class Endpoint:
    """A parsed base URL: scheme, host, port, path prefix, and the Basic credentials of its user:pass@, if any."""

    def __init__(self, url, source):
        if not isinstance(url, str):
            raise ValueError("warren_client: %s must be a string URL" % source)
        url = url.strip()
        if "://" not in url:
            url = "http://" + url
        shown = redact(url)
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port
        except ValueError:
            raise ValueError("warren_client: %s: %s is not an http:// or https:// URL" % (source, shown)) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("warren_client: %s: %s is not an http:// or https:// URL" % (source, shown))
        if parts.query or parts.fragment:
            raise ValueError("warren_client: %s: %s: the server's URL takes no query or fragment" % (source, shown))
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = port or (443 if parts.scheme == "https" else 80)
        self.path = parts.path.rstrip("/")
        self.basic = None
        if parts.username is not None:
            # Go's http.Client sends a URL's user information as Basic
            # authorization when the request has no Authorization header:
            # so does this client, when it has no token.
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            self.basic = "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
        self.url = shown.rstrip("/")  # for messages: never the password
