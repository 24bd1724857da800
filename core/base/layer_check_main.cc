// Entry point of the layer_check_<layer> executables (core/CMakeLists.txt):
// each links one core layer with all its objects forced in, so a reference
// to a symbol that only a higher layer defines fails the build.
int main() { return 0; }
