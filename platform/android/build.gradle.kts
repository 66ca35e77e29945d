// The APK: a NativeActivity (android-activity) loading libkostant_app.so, no Java/Kotlin code,
// no network permission (AndroidManifest.xml strips INTERNET; platform/tests checks it).
plugins {
    id("com.android.application") version "8.7.3"
}

android {
    namespace = "app.kostant"
    compileSdk = 35
    ndkVersion = "27.2.12479018"

    defaultConfig {
        applicationId = "app.kostant"
        minSdk = 28
        targetSdk = 35
        versionCode = 1
        versionName = "0.1.0"
        ndk {
            abiFilters += listOf("arm64-v8a")
        }
    }

    sourceSets {
        getByName("main") {
            manifest.srcFile("AndroidManifest.xml")
            // build-rust.sh writes jniLibs/arm64-v8a/libkostant_app.so here.
            jniLibs.srcDirs("jniLibs")
            // The model is shipped in the APK's assets and copied to the private files dir on
            // first start (see BUILD.md: not wired yet).
            assets.srcDirs("assets")
        }
    }

    buildTypes {
        getByName("release") {
            isMinifyEnabled = false
        }
    }

    packaging {
        jniLibs {
            // Stored uncompressed and page-aligned, so the loader maps it in place.
            useLegacyPackaging = false
        }
    }
}
