package webhooks_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/webhooks"
)

func TestForbiddenAddresses(t *testing.T) {
	t.Parallel()
	for _, a := range []string{
		"127.0.0.1", "127.9.9.9", "::1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "fc00::1", "fd12:3456::1",
		"169.254.169.254", "fe80::1", "0.0.0.0", "::", "100.64.0.1", "100.127.255.254", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
		"64:ff9b::a00:1", "224.0.0.1", "ff02::1", "255.255.255.255", "0.1.2.3",
	} {
		require.True(t, webhooks.Forbidden(netip.MustParseAddr(a)), a)
	}
	for _, a := range []string{"1.1.1.1", "8.8.8.8", "100.63.255.255", "100.128.0.1", "172.32.0.1", "2606:4700::1111", "64:ff9b::808:808"} {
		require.False(t, webhooks.Forbidden(netip.MustParseAddr(a)), a)
	}
}

// Everything that is not global unicast is refused, an IPv6 address that
// embeds an IPv4 address by that address (issue 24, item 7: the probe's
// addresses that got through).
func TestForbiddenUnlessGlobalUnicast(t *testing.T) {
	t.Parallel()
	for _, a := range []string{
		"::127.0.0.1", "::10.0.0.1", "::169.254.169.254", // IPv4-compatible
		"::ffff:0:127.0.0.1", "::ffff:0:10.0.0.1", // IPv4-translated
		"::ffff:169.254.169.254",                              // IPv4-mapped
		"2002:7f00:1::1", "2002:a00:1::", "2002:a9fe:a9fe::1", // 6to4 of 127.0.0.1, 10.0.0.1, 169.254.169.254
		"2001:0:4136:e378:8000:63bf:f5ff:fffe", // Teredo, client 10.0.0.1
		"2001:0:a00:1:8000:63bf:f7f7:f7f7",     // Teredo, server 10.0.0.1
		"fec0::1", "fec0:1::2",                 // site-local
		"2001:db8::1", "3fff::1", "192.0.2.1", "198.51.100.7", "203.0.113.9", // documentation
		"2001:2::1", "2001:10::1", "192.88.99.1", "198.19.0.1", // benchmarking, ORCHID, 6to4 relay
		"100::1", "4000::1", "::2:1:1", // not global unicast
	} {
		require.True(t, webhooks.Forbidden(netip.MustParseAddr(a)), a)
	}
	for _, a := range []string{
		"::8.8.8.8", "::ffff:0:8.8.8.8", "::ffff:8.8.8.8", "2002:808:808::1", "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
		"2a00:1450:4001:82a::200e", "2001:4860:4860::8888", "192.0.3.1", "203.0.114.1",
	} {
		require.False(t, webhooks.Forbidden(netip.MustParseAddr(a)), a)
	}
}

// lookupOf resolves names from a table; others do not resolve.
func lookupOf(table map[string][]string) webhooks.Lookup {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		addrs, ok := table[host]
		if !ok {
			return nil, errors.New("no such host")
		}
		var out []netip.Addr
		for _, a := range addrs {
			out = append(out, netip.MustParseAddr(a))
		}
		return out, nil
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	lookup := lookupOf(map[string][]string{
		"hooks.example.com":  {"93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
		"sneaky.example.com": {"93.184.215.14", "10.0.0.7"},
		"localhost":          {"127.0.0.1", "::1"},
	})
	ctx := t.Context()
	for _, ok := range []string{"https://hooks.example.com/warren?x=1", "http://hooks.example.com:8080/", "https://93.184.215.14/hook"} {
		require.NoError(t, webhooks.CheckURL(ctx, ok, false, lookup), ok)
	}
	for raw, want := range map[string]string{
		"ftp://hooks.example.com/":         "webhook.url must be an absolute http:// or https:// URL",
		"/relative":                        "webhook.url must be an absolute http:// or https:// URL",
		"hooks.example.com/x":              "webhook.url must be an absolute http:// or https:// URL",
		"https://":                         "webhook.url has no host",
		"https://u:p@hooks.example.com/":   "webhook.url must not carry a user or password",
		"http://%zz":                       "webhook.url is not a URL",
		"http://127.0.0.1:9000/":           `the host "127.0.0.1", a loopback, private`,
		"http://[::1]/":                    `the host "::1", a loopback`,
		"http://169.254.169.254/latest/":   `the host "169.254.169.254"`,
		"http://100.64.1.1/":               `the host "100.64.1.1"`,
		"http://localhost:8080/":           `the host "localhost" resolves to 127.0.0.1, a loopback`,
		"https://sneaky.example.com/":      `resolves to 10.0.0.7`,
		"https://nowhere.example.invalid/": `the host "nowhere.example.invalid" does not resolve`,
	} {
		err := webhooks.CheckURL(ctx, raw, false, lookup)
		require.ErrorContains(t, err, want, raw)
	}
	err := webhooks.CheckURL(ctx, "http://10.0.0.1/", false, lookup)
	require.ErrorIs(t, err, webhooks.ErrForbiddenAddress)
	require.ErrorContains(t, err, "--webhook-allow-private", "the error says how to allow it")

	for _, ok := range []string{"http://127.0.0.1:9000/", "http://localhost/", "http://nowhere.example.invalid/"} {
		require.NoError(t, webhooks.CheckURL(ctx, ok, true, lookup), "allowed: %s", ok)
	}
	require.Error(t, webhooks.CheckURL(ctx, "ftp://x/", true, lookup), "the form is checked whatever is allowed")
}
