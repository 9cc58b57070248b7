package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// Where a webhook may go. A webhook URL is chosen by whoever submits a
// job, so without a rule a job could make the server POST to its own
// network: the metadata service of a cloud VM, a database's HTTP port, an
// admin page on loopback. Such addresses are refused twice: when the job
// is submitted (CheckURL, which resolves a name), and at every dial (the
// Dialer's Control), which also catches a name that resolved to a public
// address at submission and to a private one later (DNS rebinding). A
// server whose receivers are on its own network says so
// (server.Config.WebhookAllowPrivate).

// ErrForbiddenAddress is the error, wrapped, of an address that webhooks
// may not reach: anything but a global unicast address (loopback,
// private, link-local, unspecified, shared, multicast, reserved,
// documentation), judged by the IPv4 address an IPv6 address embeds where
// it embeds one.
var ErrForbiddenAddress = errors.New("the address is loopback, private, link-local, unspecified or otherwise not public")

// forbiddenPrefixes are the IPv4 ranges, besides what netip.Addr's
// predicates say, that are not global unicast (IANA's special-purpose
// registry).
var forbiddenPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (carrier-grade NAT), RFC 6598
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation (TEST-NET-1)
	netip.MustParsePrefix("192.88.99.0/24"),  // the deprecated 6to4 relay anycast
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation (TEST-NET-2)
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation (TEST-NET-3)
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and the broadcast address
}

// IPv6 ranges. An IPv6 address must be global unicast (2000::/3), and
// not in one of forbidden6; one that embeds an IPv4 address (embedded6)
// is judged by that address instead, since it reaches it: through a
// NAT64 gateway, a 6to4 or Teredo relay, or a host that maps it.
var (
	globalUnicast6 = netip.MustParsePrefix("2000::/3")
	forbidden6     = []netip.Prefix{
		netip.MustParsePrefix("2001::/23"),     // IETF protocol assignments (benchmarking, ORCHID; Teredo is embedded6)
		netip.MustParsePrefix("2001:db8::/32"), // documentation
		netip.MustParsePrefix("3fff::/20"),     // documentation, RFC 9637
	}
	compatible6 = netip.MustParsePrefix("::/96")           // IPv4-compatible ::a.b.c.d (deprecated), and ::, ::1
	translated6 = netip.MustParsePrefix("::ffff:0:0:0/96") // IPv4-translated ::ffff:0:a.b.c.d, RFC 2765
	nat64       = netip.MustParsePrefix("64:ff9b::/96")    // NAT64's well-known prefix
	sixToFour   = netip.MustParsePrefix("2002::/16")       // 6to4: the IPv4 address in bits 16 to 48
	teredo      = netip.MustParsePrefix("2001::/32")       // Teredo: the server's IPv4 in bits 32 to 64, the client's inverted in the last 32
)

// Forbidden reports whether ip is an address webhooks may not reach
// unless private addresses are allowed: any address that is not global
// unicast. That is loopback (127.0.0.0/8, ::1), private (RFC 1918,
// fc00::/7), link-local (169.254.0.0/16, fe80::/10), site-local
// (fec0::/10), unspecified (0.0.0.0, ::), shared (100.64.0.0/10),
// multicast, reserved, benchmarking and documentation ranges, and every
// IPv6 address outside 2000::/3; an IPv6 address that embeds an IPv4
// address (::ffff:10.0.0.1, ::10.0.0.1, ::ffff:0:10.0.0.1,
// 64:ff9b::10.0.0.1, 6to4 2002:a00:1::, Teredo) is forbidden when that
// address is.
func Forbidden(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.Is6() {
		return forbidden6Addr(ip)
	}
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() ||
		ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() {
		return true
	}
	for _, p := range forbiddenPrefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// forbidden6Addr is Forbidden for an IPv6 address that is not IPv4-mapped.
func forbidden6Addr(ip netip.Addr) bool {
	b := ip.As16()
	v4 := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[i+1], b[i+2], b[i+3]}) }
	switch {
	case compatible6.Contains(ip), translated6.Contains(ip), nat64.Contains(ip):
		return Forbidden(v4(12))
	case sixToFour.Contains(ip):
		return Forbidden(v4(2))
	case teredo.Contains(ip):
		client := netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
		return Forbidden(v4(4)) || Forbidden(client)
	case !globalUnicast6.Contains(ip):
		return true
	}
	for _, p := range forbidden6 {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Lookup resolves a host name to its addresses (net.Resolver.LookupNetIP
// with network "ip").
type Lookup func(ctx context.Context, host string) ([]netip.Addr, error)

// defaultLookup is the system resolver.
func defaultLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// lookupTimeout bounds CheckURL's name resolution.
const lookupTimeout = 5 * time.Second

// URLError is CheckURL's error: what is wrong with a webhook URL, in
// words that name the field.
type URLError struct {
	msg string
	err error
}

func (e *URLError) Error() string { return e.msg }

// Unwrap returns the cause, ErrForbiddenAddress for an address webhooks
// may not reach.
func (e *URLError) Unwrap() error { return e.err }

// ParseURL checks the form of a webhook URL: absolute, http or https,
// with a host, without user:password (which the job's JSON would show;
// the receiver checks the signature instead). It returns the URL's host
// name or address.
func ParseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return "", &URLError{msg: fmt.Sprintf("webhook.url is not a URL: %v", err)}
	}
	switch {
	case !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https"):
		return "", &URLError{msg: fmt.Sprintf("webhook.url must be an absolute http:// or https:// URL, got %q", raw)}
	case u.Hostname() == "":
		return "", &URLError{msg: fmt.Sprintf("webhook.url has no host: %q", raw)}
	case u.User != nil:
		return "", &URLError{msg: "webhook.url must not carry a user or password: receivers authenticate warren by the signature"}
	}
	return u.Hostname(), nil
}

// CheckURL checks a webhook URL as a submission must have it (ParseURL)
// and, unless allowPrivate, that its host is not a forbidden address
// (Forbidden) nor a name any of whose addresses is one; lookup resolves
// names (nil means the system resolver). A name that does not resolve is
// refused too.
func CheckURL(ctx context.Context, raw string, allowPrivate bool, lookup Lookup) error {
	host, err := ParseURL(raw)
	if err != nil || allowPrivate {
		return err
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if Forbidden(ip) {
			return forbiddenURL(host, ip)
		}
		return nil
	}
	if lookup == nil {
		lookup = defaultLookup
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	addrs, err := lookup(ctx, host)
	if err != nil {
		return &URLError{msg: fmt.Sprintf("webhook.url: the host %q does not resolve: %v", host, err), err: err}
	}
	if len(addrs) == 0 {
		return &URLError{msg: fmt.Sprintf("webhook.url: the host %q has no address", host)}
	}
	for _, ip := range addrs {
		if Forbidden(ip) {
			return forbiddenURL(host, ip)
		}
	}
	return nil
}

// forbiddenURL is CheckURL's error for host, which is or resolves to ip.
func forbiddenURL(host string, ip netip.Addr) error {
	what := fmt.Sprintf("the host %q", host)
	if host != ip.String() {
		what = fmt.Sprintf("the host %q resolves to %s", host, ip)
	}
	return &URLError{err: ErrForbiddenAddress, msg: fmt.Sprintf("webhook.url: %s, a loopback, private, link-local or otherwise "+
		"non-public address, which webhooks may not reach unless the server runs with --webhook-allow-private", what)}
}

// dialControl is the webhook Dialer's Control: it refuses to connect to a
// forbidden address, whatever the name resolved to.
func dialControl(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("webhooks: dial %s: %w", address, err)
	}
	if Forbidden(ip) {
		return fmt.Errorf("webhooks: refusing to connect to %s: %w", host, ErrForbiddenAddress)
	}
	return nil
}
