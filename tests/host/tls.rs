//! HTTPS to the model API, end to end through the `loopr` CLI: the host's TLS (rustls with
//! ring, certificates checked against the roots the system trusts, which `SSL_CERT_FILE`
//! names here) completes a handshake and a streamed exchange with a server whose certificate
//! a trusted CA signed, and refuses a server whose issuer it does not know.

use crate::{fake_llm, nvim, scenario};

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

use fake_llm::FakeLlm;
use nvim::TestDirs;
use scenario::{loopr_command, tool_turn, valid_plan};

/// A TLS endpoint for `localhost` in front of a plain-HTTP backend, with the PEM of the CA
/// that signed its certificate.
struct TlsFront {
    port: u16,
    ca_pem: String,
    serving: tokio::task::JoinHandle<()>,
}

impl TlsFront {
    async fn start(backend: SocketAddr) -> TlsFront {
        let mut ca_params = CertificateParams::new(Vec::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "Loopr test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("CA certificate");
        let server_key = KeyPair::generate().expect("server key");
        let mut server_params =
            CertificateParams::new(vec!["localhost".to_owned()]).expect("server params");
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server_params
            .signed_by(&server_key, &ca)
            .expect("server certificate");
        let config =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("TLS versions")
                .with_no_client_auth()
                .with_single_cert(
                    vec![server_cert.der().clone()],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
                )
                .expect("server TLS config");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("local addr").port();
        let serving = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A refused handshake is what one of the runs expects; nothing to forward.
                    let Ok(mut tls) = acceptor.accept(client).await else {
                        return;
                    };
                    let Ok(mut plain) = TcpStream::connect(backend).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        TlsFront {
            port,
            ca_pem: ca.pem(),
            serving,
        }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

async fn plan_over_https(
    dirs: &TestDirs,
    fake: &FakeLlm,
    front: &TlsFront,
    trusted_roots: Option<&Path>,
) -> (bool, String, String) {
    let mut command = loopr_command(
        dirs,
        fake,
        &[
            "plan",
            "Add a --version flag",
            "--settings",
            r#"{"plan_review_passes": 0}"#,
        ],
    );
    command.env(
        "ANTHROPIC_BASE_URL",
        format!("https://localhost:{}", front.port),
    );
    if let Some(roots) = trusted_roots {
        command.env("SSL_CERT_FILE", roots);
    }
    let output = command.output().await.expect("run loopr");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_reaches_a_server_the_system_roots_trust_and_refuses_an_unknown_issuer() {
    let fake = FakeLlm::start().await;
    let front = TlsFront::start(fake.addr()).await;
    let dirs = TestDirs::new();
    let roots = dirs.home.join("trusted-roots.pem");
    std::fs::write(&roots, &front.ca_pem).expect("write the test CA");

    fake.push(tool_turn("toolu_plan", "create_plan", valid_plan()));
    let (_, stdout, stderr) = plan_over_https(&dirs, &fake, &front, Some(&roots)).await;
    assert!(
        stdout.contains("awaiting_approval"),
        "the plan streamed over TLS and waits for review\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert_eq!(fake.requests().len(), 1);

    let (succeeded, stdout, stderr) = plan_over_https(&dirs, &fake, &front, None).await;
    assert!(!succeeded);
    assert!(
        stderr.contains("the TLS handshake failed") && stderr.contains("UnknownIssuer"),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert_eq!(
        fake.requests().len(),
        1,
        "nothing reached the server untrusted"
    );
}
