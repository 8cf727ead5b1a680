//! Certificates and credentials for a throw-away control plane: one CA, a serving certificate for 127.0.0.1, a
//! client certificate per identity, and the service-account signing key. Everything lives in the plane's temp dir.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The CA and the paths of the files the components read.
pub struct Certs {
    dir: PathBuf,
    ca: Issuer<'static, KeyPair>,
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
}

/// A client identity: certificate and key files, and the same as PEM text for kubeconfigs.
pub struct ClientCert {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Certs {
    pub fn generate(dir: &Path) -> Certs {
        Self::generate_with_sans(dir, &[])
    }

    /// Like `generate`, with more names or addresses in the API server's serving certificate (real nodes reach it
    /// on a bridge address and, from pods, on the `kubernetes` Service IP).
    pub fn generate_with_sans(dir: &Path, extra_sans: &[&str]) -> Certs {
        fs::create_dir_all(dir).expect("cert dir can be created");
        let ca_key = KeyPair::generate().expect("ECDSA key generation works");
        let mut params =
            CertificateParams::new(Vec::<String>::new()).expect("empty SAN list is valid");
        params
            .distinguished_name
            .push(DnType::CommonName, "localpv-test-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = params.self_signed(&ca_key).expect("CA self-signs");
        let ca_cert_path = write(dir, "ca.crt", &ca_cert.pem());
        let ca_key_path = write(dir, "ca.key", &ca_key.serialize_pem());
        let ca = Issuer::new(params, ca_key);

        let sa = KeyPair::generate().expect("ECDSA key generation works");
        let sa_key = write(dir, "sa.key", &sa.serialize_pem());
        let sa_pub = write(dir, "sa.pub", &sa.public_key_pem());

        let mut certs = Certs {
            dir: dir.to_path_buf(),
            ca,
            ca_cert: ca_cert_path,
            ca_key: ca_key_path,
            serving_cert: PathBuf::new(),
            serving_key: PathBuf::new(),
            sa_key,
            sa_pub,
        };
        let mut sans = vec!["127.0.0.1", "localhost", "kubernetes.default.svc"];
        sans.extend_from_slice(extra_sans);
        let serving = certs.sign(
            "kube-apiserver",
            &[],
            &sans,
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        certs.serving_cert = write(dir, "serving.crt", &serving.cert_pem);
        certs.serving_key = write(dir, "serving.key", &serving.key_pem);
        certs
    }

    /// A client certificate for user `cn` in `groups` (the API server maps O= to groups).
    pub fn client(&self, cn: &str, groups: &[&str]) -> ClientCert {
        self.sign(cn, groups, &[], ExtendedKeyUsagePurpose::ClientAuth)
    }

    /// A serving certificate for loopback, signed by this CA (for servers our tests start, e.g. the extender).
    pub fn server(&self, cn: &str) -> ClientCert {
        self.sign(
            cn,
            &[],
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A serving certificate for the given names and addresses, signed by this CA.
    pub fn server_for(&self, cn: &str, sans: &[&str]) -> ClientCert {
        self.sign(cn, &[], sans, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// Writes `cert` under the plane's cert dir, returning (cert path, key path).
    pub fn write_pair(&self, name: &str, cert: &ClientCert) -> (PathBuf, PathBuf) {
        (
            write(&self.dir, &format!("{name}.crt"), &cert.cert_pem),
            write(&self.dir, &format!("{name}.key"), &cert.key_pem),
        )
    }

    fn sign(
        &self,
        cn: &str,
        groups: &[&str],
        sans: &[&str],
        usage: ExtendedKeyUsagePurpose,
    ) -> ClientCert {
        let key = KeyPair::generate().expect("ECDSA key generation works");
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans).expect("SANs are valid");
        params.distinguished_name.push(DnType::CommonName, cn);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![usage];
        let cert = params
            .signed_by(&key, &self.ca)
            .expect("CA signs leaf certificates");
        ClientCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, text).unwrap_or_else(|e| panic!("failed to write {}: {e}", path.display()));
    path
}
