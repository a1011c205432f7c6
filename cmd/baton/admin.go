package main

// The HTTP requests of status and backup to a node's --http address: the
// URL, and the secret and TLS of the security flags, as the lock commands
// use them on the client port.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// adminGet GETs url (nodeURL's; https when --tls or another TLS flag is
// given) with the secret, if any, as a Bearer token, and returns the
// response of a 200 and the URL it asked. Any other status is an error
// with the node's one-line reason. The caller closes the body.
func adminGet(ctx context.Context, url string, sec *securityOpts) (*http.Response, string, error) {
	cfg, err := sec.tlsConfig()
	if err != nil {
		return nil, url, err
	}
	if cfg != nil {
		if rest, ok := strings.CutPrefix(url, "http://"); ok {
			url = "https://" + rest
		}
	}
	secret, err := sec.secret()
	if err != nil {
		return nil, url, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, url, err
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	hc := http.DefaultClient
	if cfg != nil {
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, Proxy: http.ProxyFromEnvironment}}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, url, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp, url, nil
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	reason := strings.Join(strings.Fields(string(msg)), " ")
	switch resp.StatusCode {
	case http.StatusNotFound:
		reason = "no " + req.URL.Path + " here (a batond from before it?)"
	case http.StatusUnauthorized:
		if secret == "" {
			reason = "the node wants its secret: --auth-file or BATON_AUTH"
		} else {
			reason = "the node refused the secret"
		}
	}
	return nil, url, fmt.Errorf("%s: %s: %s", url, resp.Status, reason)
}
