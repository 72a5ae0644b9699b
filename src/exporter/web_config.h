// The web configuration file of Prometheus' exporter-toolkit (`--web-config-file`, as
// dcgm-exporter takes it; docs/exporter.md "TLS and basic auth"): TLS, basic auth with bcrypt
// hashes, extra response headers and a rate limit. Parsed as strictly as the toolkit does
// (unknown keys are errors), with errors naming file:line and the key.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace kgpu::exporter {

enum class ClientAuth {
    none,                // NoClientCert (default)
    request,             // RequestClientCert: asked for, not verified
    require_any,         // RequireAnyClientCert (alias RequireClientCert): required, not verified
    verify_if_given,     // VerifyClientCertIfGiven
    require_and_verify,  // RequireAndVerifyClientCert
};

struct TlsServerConfig {
    std::string cert_pem, key_pem, client_ca_pem;  // contents: inline, or read from the *_file
    std::string cert_file, key_file, client_ca_file;  // as resolved (relative to the config's dir)
    ClientAuth client_auth = ClientAuth::none;
    std::optional<std::vector<std::string>> client_allowed_sans;  // set: a client cert must have one
    int min_version = 0x0303;  // TLS 1.2 (protocol version numbers as on the wire)
    int max_version = 0x0304;  // TLS 1.3
    std::vector<std::string> cipher_suites;  // OpenSSL names of the Go names given (TLS <= 1.2)
    std::vector<std::string> curves;         // OpenSSL group names
    bool prefer_server_cipher_suites = true;
};

struct WebConfig {
    std::string path;                   // the file
    std::optional<TlsServerConfig> tls;  // nullopt: plain HTTP (no tls_server_config, or an empty one)
    bool http2 = true;                  // accepted for compatibility; kgpu answers HTTP/1.1 only
    std::vector<std::pair<std::string, std::string>> headers;  // http_server_config.headers
    std::map<std::string, std::string, std::less<>> users;     // basic_auth_users: user -> bcrypt hash
    std::chrono::nanoseconds rate_interval{0};                 // rate_limit: 0 = off
    unsigned rate_burst = 0;
    // The files this config was read from, for reloading when one changes.
    std::vector<std::string> files;
};

// Reads and checks `path`, including that the certificate and key files can be read (not that
// they parse: tls.h does that). Errors: Code::not_found / io when a file cannot be read, parse
// ("<file>:<line>: key 'tls_server_config.min_version': unknown TLS version 'TLS14' (expected
// one of TLS10, TLS11, TLS12, TLS13)").
Result<WebConfig> load_web_config(const std::string& path);

// Go's time.ParseDuration subset the toolkit's YAML takes: "1s", "250ms", "1m30s", "0".
Result<std::chrono::nanoseconds> parse_go_duration(std::string_view text);

// Whether `hash` has bcrypt's shape ($2a$, $2b$ or $2y$, cost 04-31, 53 characters of salt and hash).
bool is_bcrypt_hash(std::string_view hash);

// Loads libcrypt (for bcrypt_matches) now. Errors: not_found, naming the library and its package.
Status load_bcrypt();

// bcrypt through libcrypt (libxcrypt), loaded on first use. Errors: not_found when libcrypt.so.1
// cannot be loaded or lacks crypt_rn. Thread-safe (each call brings its own work area).
Result<bool> bcrypt_matches(std::string_view password, const std::string& hash);

}  // namespace kgpu::exporter
