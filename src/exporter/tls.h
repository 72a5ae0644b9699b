// TLS for the exporter's HTTP server, with OpenSSL 3 (libssl.so.3) loaded by dlopen the first
// time a web config asks for TLS: the kgpu binary does not link it, so the device plugin and an
// exporter without TLS never map it (issue #13's RSS, issue #14). The entry points are declared
// from OpenSSL's own headers (decltype), so a mismatch is a compile error, as for NVML.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/error.h"
#include "exporter/web_config.h"

namespace kgpu::exporter {

class TlsStream;

// The client side (kube/client.h: the API server). The *_source fields name where each PEM came
// from, for messages.
struct TlsClientConfig {
    std::string ca_pem, ca_source;        // trusted CAs; "": the handshake fails unless insecure
    std::string cert_pem, cert_source;    // client certificate; "": none
    std::string key_pem, key_source;      // its key
    std::string host;                     // the name or IP address the server's certificate must carry
    bool insecure = false;                // no verification (kubeconfig's insecure-skip-tls-verify)
};

// One server configuration (certificate, key, client CAs, versions, ciphers).
class TlsContext {
public:
    // Loads libssl.so.3 when not loaded yet and builds the context. Errors: not_found (OpenSSL 3
    // is not installed; the message names the Debian package), parse (a certificate or key does
    // not load, or they do not match; the message names the file and OpenSSL's reason).
    static Result<std::shared_ptr<TlsContext>> create(const TlsServerConfig& config);
    ~TlsContext();
    TlsContext(const TlsContext&) = delete;
    TlsContext& operator=(const TlsContext&) = delete;

    // A server-side session on a connected, non-blocking socket (the caller keeps the fd).
    std::unique_ptr<TlsStream> accept(int fd) const;

private:
    TlsContext() = default;
    friend class TlsStream;
    void* ctx_ = nullptr;  // SSL_CTX*
    std::shared_ptr<const TlsServerConfig> config_;
};

// Handshakes as a client on a connected socket (blocking; the caller sets its timeouts) and
// verifies the server's certificate against config.ca_pem and config.host. Errors: not_found
// (no OpenSSL 3), parse (a PEM that does not load), unavailable (the handshake failed, with why).
Result<std::unique_ptr<TlsStream>> tls_connect(int fd, const TlsClientConfig& config);

// Gives back the resident pages of OpenSSL's read-only segments (common/memory.h): a process
// that made one TLS connection otherwise keeps 4.4 MiB of libcrypto in its RSS for good, most of
// it brought in by the kernel's fault-around and never used again; a later TLS call faults back
// only what it runs. Then malloc_trim(0) returns the heap OpenSSL freed. Safe while other threads
// use OpenSSL. Nothing when OpenSSL was never loaded. As memory.h says, breakpoints and uprobes
// on libssl/libcrypto do not survive it.
void tls_release_pages();

class TlsStream {
public:
    enum class Io { ok, want_read, want_write, closed, error };
    ~TlsStream();
    TlsStream(const TlsStream&) = delete;
    TlsStream& operator=(const TlsStream&) = delete;

    // Drives the handshake; ok once done (client_allowed_sans checked). error(): why it failed.
    Io handshake();
    // Up to `cap` bytes into `buf`; `n` set when ok. closed: the peer closed (close_notify or EOF).
    Io read(char* buf, std::size_t cap, std::size_t& n);
    // Writes up to `len` bytes; `n` set when ok (may be less than len).
    Io write(const char* buf, std::size_t len, std::size_t& n);
    // Sends close_notify, best effort.
    void shutdown();
    const std::string& error() const { return error_; }

private:
    friend class TlsContext;
    friend Result<std::unique_ptr<TlsStream>> tls_connect(int fd, const TlsClientConfig& config);
    TlsStream() = default;
    Io result(int ret, const char* what);
    void* ssl_ = nullptr;  // SSL*
    std::shared_ptr<const TlsServerConfig> config_;
    std::string error_;
};

}  // namespace kgpu::exporter
