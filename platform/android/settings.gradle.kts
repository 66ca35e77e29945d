// Gradle project for the Kostant APK. The Rust library is built beforehand by build-rust.sh
// (cargo-ndk) into jniLibs/; Gradle only packages it with the manifest. See BUILD.md.
pluginManagement {
    repositories {
        google()
        mavenCentral()
        gradlePluginPortal()
    }
}
dependencyResolutionManagement {
    repositories {
        google()
        mavenCentral()
    }
}
rootProject.name = "kostant"
