//! The key-encryption key in the Android Keystore: an AES-256-GCM key generated inside the
//! phone's keystore (the TEE or StrongBox where the phone has one), marked non-exportable by
//! the keystore itself, that wraps and unwraps the history's data key; the app never sees the
//! KEK's bytes. Reached through JNI (`java.security.KeyStore`, `javax.crypto.Cipher`), since the
//! NDK has no keystore API.
//!
//! Each KEK is an alias `kostant-kek-<generation>`; the current one is the lowest generation
//! present, a staged one (a rotation begun) any higher. A wrapping is `KAK1`, the generation
//! (u32, big-endian), GCM's 12-byte IV (the keystore picks it: randomized encryption stays on)
//! and the ciphertext with its tag; `context` is the associated data. Rotation follows
//! [`KeyStore`]'s two steps: stage generation n+1 and wrap under it, then delete the others.
//!
//! Compiled for Android in CI; not run here (no device or emulator): platform/android/BUILD.md.

use jni::objects::{JByteArray, JObject, JValue};
use jni::{jni_sig, jni_str, Env, JavaVM};

use crate::keystore::{DataKey, KeyStore, KEY_LEN};
use crate::PlatformError;

const MAGIC: &[u8; 4] = b"KAK1";
const IV_LEN: usize = 12;
const ALIAS_PREFIX: &str = "kostant-kek-";

/// The Android Keystore as a [`KeyStore`].
pub struct AndroidKeyStore {
    vm: JavaVM,
}

impl AndroidKeyStore {
    /// The keystore of this process's Java VM (the activity's glue has registered it).
    pub fn new() -> Result<Self, PlatformError> {
        let vm = JavaVM::singleton().map_err(|e| keystore_error("no Java VM", e))?;
        Ok(AndroidKeyStore { vm })
    }

    fn with_env<T>(
        &self,
        what: &str,
        f: impl FnOnce(&mut Env) -> jni::errors::Result<T>,
    ) -> Result<T, PlatformError> {
        self.vm
            .attach_current_thread(|env| f(env))
            .map_err(|e| keystore_error(what, e))
    }
}

fn keystore_error(what: &str, e: impl std::fmt::Display) -> PlatformError {
    PlatformError::Keystore(format!("{what}: {e}"))
}

/// The loaded `AndroidKeyStore` instance.
fn keystore<'l>(env: &mut Env<'l>) -> jni::errors::Result<JObject<'l>> {
    let name = env.new_string("AndroidKeyStore")?;
    let ks = env
        .call_static_method(
            jni_str!("java/security/KeyStore"),
            jni_str!("getInstance"),
            jni_sig!("(Ljava/lang/String;)Ljava/security/KeyStore;"),
            &[JValue::Object(&name)],
        )?
        .l()?;
    env.call_method(
        &ks,
        jni_str!("load"),
        jni_sig!("(Ljava/security/KeyStore$LoadStoreParameter;)V"),
        &[JValue::Object(&JObject::null())],
    )?;
    Ok(ks)
}

/// The generations of our KEKs present in the keystore, lowest first.
fn generations(env: &mut Env, ks: &JObject) -> jni::errors::Result<Vec<u32>> {
    let aliases = env
        .call_method(
            ks,
            jni_str!("aliases"),
            jni_sig!("()Ljava/util/Enumeration;"),
            &[],
        )?
        .l()?;
    let mut found = Vec::new();
    while env
        .call_method(&aliases, jni_str!("hasMoreElements"), jni_sig!("()Z"), &[])?
        .z()?
    {
        let alias = env
            .call_method(
                &aliases,
                jni_str!("nextElement"),
                jni_sig!("()Ljava/lang/Object;"),
                &[],
            )?
            .l()?;
        let alias = env.cast_local::<jni::objects::JString>(alias)?;
        let alias: String = alias.mutf8_chars(env)?.into();
        if let Some(n) = alias
            .strip_prefix(ALIAS_PREFIX)
            .and_then(|g| g.parse().ok())
        {
            found.push(n);
        }
    }
    found.sort_unstable();
    Ok(found)
}

fn alias(generation: u32) -> String {
    format!("{ALIAS_PREFIX}{generation}")
}

/// Generates an AES-256 key for GCM, usable to encrypt and decrypt, under `alias`.
fn generate(env: &mut Env, alias: &str) -> jni::errors::Result<()> {
    let alias = env.new_string(alias)?;
    // KeyProperties.PURPOSE_ENCRYPT | PURPOSE_DECRYPT
    let builder = env.new_object(
        jni_str!("android/security/keystore/KeyGenParameterSpec$Builder"),
        jni_sig!("(Ljava/lang/String;I)V"),
        &[JValue::Object(&alias), JValue::Int(1 | 2)],
    )?;
    let gcm = string_array(env, "GCM")?;
    env.call_method(
        &builder,
        jni_str!("setBlockModes"),
        jni_sig!("([Ljava/lang/String;)Landroid/security/keystore/KeyGenParameterSpec$Builder;"),
        &[JValue::Object(&gcm)],
    )?;
    let no_padding = string_array(env, "NoPadding")?;
    env.call_method(
        &builder,
        jni_str!("setEncryptionPaddings"),
        jni_sig!("([Ljava/lang/String;)Landroid/security/keystore/KeyGenParameterSpec$Builder;"),
        &[JValue::Object(&no_padding)],
    )?;
    env.call_method(
        &builder,
        jni_str!("setKeySize"),
        jni_sig!("(I)Landroid/security/keystore/KeyGenParameterSpec$Builder;"),
        &[JValue::Int(256)],
    )?;
    let spec = env
        .call_method(
            &builder,
            jni_str!("build"),
            jni_sig!("()Landroid/security/keystore/KeyGenParameterSpec;"),
            &[],
        )?
        .l()?;
    let (aes, provider) = (env.new_string("AES")?, env.new_string("AndroidKeyStore")?);
    let generator = env
        .call_static_method(
            jni_str!("javax/crypto/KeyGenerator"),
            jni_str!("getInstance"),
            jni_sig!("(Ljava/lang/String;Ljava/lang/String;)Ljavax/crypto/KeyGenerator;"),
            &[JValue::Object(&aes), JValue::Object(&provider)],
        )?
        .l()?;
    env.call_method(
        &generator,
        jni_str!("init"),
        jni_sig!("(Ljava/security/spec/AlgorithmParameterSpec;)V"),
        &[JValue::Object(&spec)],
    )?;
    env.call_method(
        &generator,
        jni_str!("generateKey"),
        jni_sig!("()Ljavax/crypto/SecretKey;"),
        &[],
    )?;
    Ok(())
}

fn string_array<'l>(env: &mut Env<'l>, s: &str) -> jni::errors::Result<JObject<'l>> {
    let s = env.new_string(s)?;
    let array = env.new_object_array(1, jni_str!("java/lang/String"), &s)?;
    Ok(array.into())
}

fn delete(env: &mut Env, ks: &JObject, generation: u32) -> jni::errors::Result<()> {
    let name = env.new_string(alias(generation))?;
    env.call_method(
        ks,
        jni_str!("deleteEntry"),
        jni_sig!("(Ljava/lang/String;)V"),
        &[JValue::Object(&name)],
    )?;
    Ok(())
}

/// AES/GCM under the KEK of `generation`: encrypts `data` (returning IV and ciphertext) or,
/// given an IV, decrypts it.
fn gcm(
    env: &mut Env,
    ks: &JObject,
    generation: u32,
    iv: Option<&[u8]>,
    context: &[u8],
    data: &[u8],
) -> jni::errors::Result<(Vec<u8>, Vec<u8>)> {
    let name = env.new_string(alias(generation))?;
    let key = env
        .call_method(
            ks,
            jni_str!("getKey"),
            jni_sig!("(Ljava/lang/String;[C)Ljava/security/Key;"),
            &[JValue::Object(&name), JValue::Object(&JObject::null())],
        )?
        .l()?;
    let transform = env.new_string("AES/GCM/NoPadding")?;
    let cipher = env
        .call_static_method(
            jni_str!("javax/crypto/Cipher"),
            jni_str!("getInstance"),
            jni_sig!("(Ljava/lang/String;)Ljavax/crypto/Cipher;"),
            &[JValue::Object(&transform)],
        )?
        .l()?;
    match iv {
        // Cipher.ENCRYPT_MODE: the keystore picks the IV.
        None => env.call_method(
            &cipher,
            jni_str!("init"),
            jni_sig!("(ILjava/security/Key;)V"),
            &[JValue::Int(1), JValue::Object(&key)],
        )?,
        // Cipher.DECRYPT_MODE with the stored IV and a 128-bit tag.
        Some(iv) => {
            let iv = env.byte_array_from_slice(iv)?;
            let spec = env.new_object(
                jni_str!("javax/crypto/spec/GCMParameterSpec"),
                jni_sig!("(I[B)V"),
                &[JValue::Int(128), JValue::Object(&iv)],
            )?;
            env.call_method(
                &cipher,
                jni_str!("init"),
                jni_sig!("(ILjava/security/Key;Ljava/security/spec/AlgorithmParameterSpec;)V"),
                &[JValue::Int(2), JValue::Object(&key), JValue::Object(&spec)],
            )?
        }
    };
    let aad = env.byte_array_from_slice(context)?;
    env.call_method(
        &cipher,
        jni_str!("updateAAD"),
        jni_sig!("([B)V"),
        &[JValue::Object(&aad)],
    )?;
    let input = env.byte_array_from_slice(data)?;
    let out = env
        .call_method(
            &cipher,
            jni_str!("doFinal"),
            jni_sig!("([B)[B"),
            &[JValue::Object(&input)],
        )?
        .l()?;
    let out = env.convert_byte_array(env.cast_local::<JByteArray>(out)?)?;
    let used_iv = match iv {
        Some(iv) => iv.to_vec(),
        None => {
            let iv = env
                .call_method(&cipher, jni_str!("getIV"), jni_sig!("()[B"), &[])?
                .l()?;
            env.convert_byte_array(env.cast_local::<JByteArray>(iv)?)?
        }
    };
    Ok((used_iv, out))
}

fn encode(generation: u32, iv: &[u8], sealed: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + 4 + iv.len() + sealed.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&generation.to_be_bytes());
    out.extend_from_slice(iv);
    out.extend_from_slice(sealed);
    out
}

fn decode(wrapped: &[u8]) -> Result<(u32, &[u8], &[u8]), PlatformError> {
    if wrapped.len() < 8 + IV_LEN + KEY_LEN + 16 || &wrapped[..4] != MAGIC {
        return Err(PlatformError::KeyUnwrap);
    }
    let generation = u32::from_be_bytes([wrapped[4], wrapped[5], wrapped[6], wrapped[7]]);
    Ok((generation, &wrapped[8..8 + IV_LEN], &wrapped[8 + IV_LEN..]))
}

impl AndroidKeyStore {
    fn wrap_under(
        &self,
        key: &DataKey,
        context: &[u8],
        stage: bool,
    ) -> Result<Vec<u8>, PlatformError> {
        self.with_env("wrapping the history key", |env| {
            let ks = keystore(env)?;
            let gens = generations(env, &ks)?;
            let generation = match (gens.first(), stage) {
                (None, _) => {
                    generate(env, &alias(0))?;
                    0
                }
                (Some(&current), false) => current,
                (Some(&current), true) => {
                    // Drop rotations a crash left staged; stage the next generation.
                    for &g in gens.iter().filter(|&&g| g != current) {
                        delete(env, &ks, g)?;
                    }
                    generate(env, &alias(current + 1))?;
                    current + 1
                }
            };
            let (iv, sealed) = gcm(env, &ks, generation, None, context, &key.0)?;
            Ok((generation, iv, sealed))
        })
        .and_then(|(generation, iv, sealed)| {
            if iv.len() != IV_LEN {
                return Err(PlatformError::Keystore(format!(
                    "the keystore chose a {}-byte IV",
                    iv.len()
                )));
            }
            Ok(encode(generation, &iv, &sealed))
        })
    }
}

impl KeyStore for AndroidKeyStore {
    fn wrap(&self, key: &DataKey, context: &[u8]) -> Result<Vec<u8>, PlatformError> {
        self.wrap_under(key, context, false)
    }

    fn unwrap(&self, wrapped: &[u8], context: &[u8]) -> Result<DataKey, PlatformError> {
        let (generation, iv, sealed) = decode(wrapped)?;
        let plain = self
            .vm
            .attach_current_thread(|env| {
                let ks = keystore(env)?;
                let gens = generations(env, &ks)?;
                if !gens.contains(&generation) {
                    return Ok(None);
                }
                let (_, plain) = gcm(env, &ks, generation, Some(iv), context, sealed)?;
                // A wrapping that only a staged KEK opens was stored: finish that rotation.
                if gens.first() != Some(&generation) {
                    for &g in gens.iter().filter(|&&g| g != generation) {
                        delete(env, &ks, g)?;
                    }
                }
                Ok(Some(plain))
            })
            .map_err(|e: jni::errors::Error| match &e {
                // Another key, another context, or altered bytes: GCM's tag does not match.
                jni::errors::Error::CaughtJavaException { name, .. }
                    if name.contains("AEADBadTagException") =>
                {
                    PlatformError::KeyUnwrap
                }
                _ => keystore_error("unwrapping the history key", e),
            })?;
        let plain = plain.ok_or(PlatformError::KeyUnwrap)?;
        let bytes: [u8; KEY_LEN] = plain
            .as_slice()
            .try_into()
            .map_err(|_| PlatformError::KeyUnwrap)?;
        Ok(DataKey(bytes))
    }

    fn begin_rotation(&self, key: &DataKey, context: &[u8]) -> Result<Vec<u8>, PlatformError> {
        self.wrap_under(key, context, true)
    }

    fn finish_rotation(&self, wrapped: &[u8], _context: &[u8]) -> Result<(), PlatformError> {
        let (generation, _, _) = decode(wrapped)?;
        self.with_env("finishing the key rotation", |env| {
            let ks = keystore(env)?;
            for g in generations(env, &ks)? {
                if g != generation {
                    delete(env, &ks, g)?;
                }
            }
            Ok(())
        })
    }

    fn describe(&self) -> String {
        "the Android Keystore (a key that never leaves the phone's secure hardware)".into()
    }
}
