// Test helpers for the exporter's TLS: a blocking HTTPS client on loopback (OpenSSL, linked into
// the tests only), certificates made with the openssl command, and bcrypt hashes from libcrypt.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "metrics_text.h"

namespace kgpu::test {

struct TlsClientOptions {
    std::string ca_file;                  // verify the server against it; "" = no verification
    std::string cert_file, key_file;      // a client certificate
    std::vector<std::string> headers;     // extra request headers
    int timeout_ms = 10000;
    bool read_answer = true;              // false: send the request and hang up at once
    int pipelined = 1;                    // the request sent this many times in one write
};

// One request on a fresh TLS connection with Connection: close. status 0 when the connection or
// the handshake failed; `error` then says why.
struct TlsResult {
    HttpResult http;
    std::string error;
};
TlsResult https_request(int port, const std::string& method, const std::string& path, const TlsClientOptions& o = {});

// Made with `openssl` in `dir`: a CA, a server certificate for 127.0.0.1/localhost signed by it,
// and a client certificate (SANs: DNS:client.example, URI:spiffe://test/client) signed by it.
struct TestPki {
    std::string ca_cert, ca_key, server_cert, server_key, client_cert, client_key;
};
std::optional<TestPki> make_pki(const std::string& dir, std::string& error);

// "Basic <base64(user:password)>"
std::string basic_auth(const std::string& user, const std::string& password);

// A bcrypt hash of `password` ("$2b$04$..."), from libcrypt.
std::string bcrypt_hash(const std::string& password, int cost = 4);

}  // namespace kgpu::test
