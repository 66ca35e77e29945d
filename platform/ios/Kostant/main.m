// Kostant for iOS: all of the app is the Rust library (kostant_app, built as a static
// library for aarch64-apple-ios); this file only hands it the main thread.
extern void kostant_ios_main(void);

int main(int argc, char *argv[]) {
    (void)argc;
    (void)argv;
    kostant_ios_main();
    return 0;
}
