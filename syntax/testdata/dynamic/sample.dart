import 'dart:async';

// print(commented) is a decoy: comments never match code.
class Player {
  StreamSubscription? sub;
  Timer? timer;
  Timer? other;

  void stop() {
    if (sub != null) sub.dispose();
    if (timer != null) other.dispose();
    if (timer != null) {
      timer.cancel();
    }
  }

  void report(int n) {
    print(n);
    final msg = 'print(decoy) in a string';
    var total = print(n + 1) + describe(print(msg));
    print(
      n * 2,
    );
  }
}

void main() {
  final p = Player();
  dispose(p);
  dispose(p.timer);
  p.report(3);
}
